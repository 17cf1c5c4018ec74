"""Messages and the WebSocket stream through the gateway, answered by a scripted model.

Real HTTP and WebSocket on the session's Ray Serve, real Conversation actors; the model is a
``scripted`` profile (core/llm/scripted.py), never the real one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import Cluster, dashboard_url, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client, unique

DONE = {"turn.completed", "turn.failed"}


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "streamer")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        yield client


def scripted_agent(api: httpx.Client, script: list[dict[str, Any]]) -> str:
    """An agent (made through the REST API) whose model replays ``script``."""
    profile_id, persona_id = unique("scripted"), unique("persona")
    profile = {"provider": "scripted", "model": "script", "script": script}
    assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
    persona = {"system_prompt": "You are a test agent.", "model_profile_id": profile_id}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    agent = api.post("/v1/agents", json={"name": "scripted", "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    return str(agent.json()["id"])


def open_stream(gateway_url: str, conv_id: str, key: str, after_seq: int = 0) -> ClientConnection:
    ws_url = gateway_url.replace("http://", "ws://")
    return connect(
        f"{ws_url}/v1/conversations/{conv_id}/stream?after_seq={after_seq}",
        additional_headers={"Authorization": f"Bearer {key}"},
        proxy=None,
        open_timeout=30,
    )


def read_until(ws: ClientConnection, types: set[str], timeout: float = 60) -> list[dict[str, Any]]:
    """Frames up to and including the first whose type is in ``types``."""
    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(ws.recv(timeout=timeout))
        frames.append(frame)
        if frame["type"] in types:
            return frames


def durable(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seq"] for f in frames if f.get("seq") is not None]


def test_post_then_stream_tokens(gateway_url: str, api: httpx.Client, key: str) -> None:
    agent_id = scripted_agent(api, [{"reply": "hello from the script"}])
    conv_id = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    with open_stream(gateway_url, conv_id, key) as ws:
        read_until(ws, {"subscribed"})  # from here on no token can be missed
        posted = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": "hi"})
        assert posted.status_code == 202, posted.text
        ack = posted.json()
        frames = read_until(ws, DONE)
    assert frames[-1]["type"] == "turn.completed" and frames[-1]["turn_id"] == ack["turn_id"]
    tokens = "".join(f["delta"] for f in frames if f["type"] == "token")
    assert tokens == "hello from the script"
    seqs = durable(frames)
    assert seqs == list(range(1, len(seqs) + 1))  # conversation_started first, no gap

    messages = api.get(f"/v1/conversations/{conv_id}/messages").json()["items"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "hi"),
        ("agent", "hello from the script"),
    ]
    assert messages[0]["id"] == ack["message_id"]
    turns = api.get(f"/v1/conversations/{conv_id}/turns").json()["items"]
    assert [t["id"] for t in turns] == [ack["turn_id"]]
    turn = api.get(f"/v1/conversations/{conv_id}/turns/{ack['turn_id']}").json()
    assert turn["status"] == "completed" and isinstance(turn["moves"], list)
    stored = api.get(f"/v1/conversations/{conv_id}/events").json()["items"]
    assert [e["seq"] for e in stored] == seqs


def niceness(pid: int) -> int:
    """A process's niceness (field 19 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


def test_the_gateway_and_proxy_run_ahead_of_workers(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    """The gateway replica and the Serve proxy run at WONDER_GATEWAY_NICENESS (0); every actor of
    ours (namespace ``wonder``: conversation actors, the directory, what the gateway creates) at
    Ray's worker niceness (15): a starting worker (at 0 until Ray renices it) does not outrank
    the path of an acknowledgement, and nothing the gateway starts inherits its place. Both are
    added to the niceness Ray started with (the session's own: ``make test``'s side lane runs at
    5), up to the kernel's 19."""
    from ray.util.state import list_actors

    from cluster.naming import NAMESPACE

    agent_id = scripted_agent(api, [{"reply": "hi"}])
    conv_id = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    with open_stream(gateway_url, conv_id, key) as ws:
        ws.send(json.dumps({"type": "message", "content": "hi"}))
        read_until(ws, DONE)
    alive = list_actors(
        address=dashboard_url(), filters=[("state", "=", "ALIVE")], limit=10_000, detail=True
    )
    by_class: dict[str, set[int]] = {}
    ours: set[int] = set()
    for actor in alive:
        nice = niceness(int(actor.pid))
        by_class.setdefault(actor.class_name, set()).add(nice)
        if actor.ray_namespace == NAMESPACE:
            ours.add(nice)
    base = os.getpriority(os.PRIO_PROCESS, 0)  # this session's niceness, which Ray's inherits
    assert by_class["ProxyActor"] == {base}
    assert by_class["ServeController"] == {base}
    gateways = [ns for c, ns in by_class.items() if c.startswith("ServeReplica:gateway")]
    assert gateways and set().union(*gateways) == {base}
    assert {"ConversationActor", "ConversationDirectoryActor"} <= set(by_class)
    assert ours == {min(base + 15, 19)}


def test_chat_over_the_socket_and_bad_frames(gateway_url: str, api: httpx.Client, key: str) -> None:
    agent_id = scripted_agent(api, [{"reply": "echo {{last_user}}"}])
    conv_id = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    with open_stream(gateway_url, conv_id, key) as ws:
        # A client that wants every token of a fast reply sends once it is subscribed (a message
        # sent earlier is acknowledged at once, and its reply may arrive whole, as its message).
        read_until(ws, {"subscribed"})
        ws.send("this is not json")
        error = read_until(ws, {"error"})[-1]
        assert error["error"]["code"] == "INVALID_INPUT" and error["seq"] is None
        ws.send(json.dumps({"type": "message"}))
        assert "content" in read_until(ws, {"error"})[-1]["error"]["message"]
        ws.send(json.dumps({"type": "message", "content": "ping pong", "id": "req-1"}))
        frames = read_until(ws, DONE)
    acks = [f for f in frames if f["type"] == "ack"]
    assert len(acks) == 1 and acks[0]["id"] == "req-1"
    assert "".join(f["delta"] for f in frames if f["type"] == "token") == "echo ping pong"


def test_reconnect_by_seq_has_no_gap_and_no_duplicate(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    # A fresh scripted model per turn: every turn answers after a delay, long enough to drop.
    agent_id = scripted_agent(api, [{"reply": "answer to {{last_user}}", "delay_s": 1.0}])
    conv_id = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    with open_stream(gateway_url, conv_id, key) as ws:
        ws.send(json.dumps({"type": "message", "content": "one"}))
        before = read_until(ws, DONE)
        ws.send(json.dumps({"type": "message", "content": "two"}))
        before += read_until(ws, {"turn.started"})  # the second turn is running: drop now
    last_seen = durable(before)[-1]

    second = [t for t in api.get(f"/v1/conversations/{conv_id}/turns").json()["items"]][-1]

    def finished() -> bool:
        turn = api.get(f"/v1/conversations/{conv_id}/turns/{second['id']}").json()
        return bool(turn["status"] != "active")

    wait_for(finished, timeout=60)  # everything after the drop happens while disconnected
    with open_stream(gateway_url, conv_id, key, after_seq=last_seen) as ws:
        after = read_until(ws, DONE)
    seqs = durable(before) + durable(after)
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    stored = [e["seq"] for e in api.get(f"/v1/conversations/{conv_id}/events").json()["items"]]
    assert seqs == stored
    answers = [
        f["message"]["content"]
        for f in after
        if f["type"] == "message" and f["message"]["role"] == "agent"
    ]
    assert answers == ["answer to two"]


def test_socket_refuses_strangers(
    gateway_url: str, api: httpx.Client, ray_cluster: Cluster
) -> None:
    conv_id = api.post("/v1/conversations", json={}).json()["id"]
    stranger = make_client(ray_cluster.store, "stranger")[1]
    for key, code in ((stranger, 4404), ("wk_wrong", 4401)):
        with open_stream(gateway_url, conv_id, key) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "error"
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == code


def test_completed_conversation_refuses_messages(api: httpx.Client) -> None:
    agent_id = scripted_agent(api, [{"reply": "ok"}])
    conv_id = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    done = api.post(f"/v1/conversations/{conv_id}/complete")
    assert done.status_code == 200 and done.json()["status"] == "completed"
    refused = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": "hi"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "CONFLICT"
    types = [e["type"] for e in api.get(f"/v1/conversations/{conv_id}/events").json()["items"]]
    assert types == ["conversation_started", "conversation_ended"]
