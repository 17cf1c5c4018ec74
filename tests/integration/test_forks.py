"""Forks (seed 003) over real HTTP and WebSocket on the session's Ray, answered by a scripted model
whose reply shows the history context assembly gave it (``{{history}}``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, error_of, http_client
from tests.integration.test_gateway_stream import open_stream, scripted_agent

ECHO = [{"reply": "saw: {{history}}"}]


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "forker")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        yield client


@pytest.fixture
def stranger(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(gateway_url, make_client(ray_cluster.store, "stranger")[1]) as client:
        yield client


def say(api: httpx.Client, conv_id: str, content: str, **extra: Any) -> dict[str, Any]:
    """Post a message and wait for its turn to end; returns the ack."""
    posted = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": content, **extra})
    assert posted.status_code == 202, posted.text
    ack: dict[str, Any] = posted.json()

    def ended() -> bool:
        turn = api.get(f"/v1/conversations/{conv_id}/turns/{ack['turn_id']}").json()
        return turn["status"] != "active"

    wait_for(ended, timeout=60)
    return ack


def messages(api: httpx.Client, conv_id: str, **params: Any) -> list[dict[str, Any]]:
    found = api.get(f"/v1/conversations/{conv_id}/messages", params=params)
    assert found.status_code == 200, found.text
    return list(found.json()["items"])


def fork(api: httpx.Client, conv_id: str, turn_id: str) -> dict[str, Any]:
    made = api.post(f"/v1/conversations/{conv_id}/forks", json={"turn_id": turn_id})
    assert made.status_code == 201, made.text
    return dict(made.json())


def test_fork_sees_the_source_up_to_its_turn(gateway_url: str, api: httpx.Client, key: str) -> None:
    agent_id = scripted_agent(api, ECHO)
    source = api.post("/v1/conversations", json={"agent_id": agent_id, "title": "s"}).json()["id"]
    t1, t2, t3 = (say(api, source, word)["turn_id"] for word in ("one", "two", "three"))
    source_last = api.get(f"/v1/conversations/{source}/events").json()["items"][-1]["seq"]

    forked = fork(api, source, t2)
    assert forked["forked_from_conversation_id"] == source
    assert forked["forked_at_turn_id"] == t2
    assert forked["agent_id"] == agent_id and forked["started_by_conversation_id"] is None
    fid = forked["id"]

    inherited = messages(api, fid)
    assert [m["content"] for m in inherited if m["role"] == "user"] == ["one", "two"]
    assert {(m["conversation_id"], m["inherited_from"]) for m in inherited} == {(fid, source)}
    turns = api.get(f"/v1/conversations/{fid}/turns").json()["items"]
    assert [(t["id"], t["inherited_from"]) for t in turns] == [(t1, source), (t2, source)]
    assert api.get(f"/v1/conversations/{fid}/turns/{t1}").json()["inherited_from"] == source
    assert api.get(f"/v1/conversations/{fid}/turns/{t3}").status_code == 404
    events = api.get(f"/v1/conversations/{fid}/events").json()["items"]
    own = [e for e in events if e.get("inherited_from") is None]
    assert own[0]["type"] == "conversation_started" and own[0]["seq"] == source_last + 1
    assert own[0]["forked_at_turn_id"] == t2
    assert all(e.get("turn_id") != t3 for e in events)

    # The fork's own turn continues from the fork turn, and its model sees the inherited history.
    t4 = say(api, fid, "four")["turn_id"]
    turn = api.get(f"/v1/conversations/{fid}/turns/{t4}").json()
    assert turn["parent_turn_id"] == t2 and turn["inherited_from"] is None
    after = messages(api, fid)
    answer = after[-1]["content"]
    assert "one" in answer and "two" in answer and "four" in answer and "three" not in answer
    assert [m["inherited_from"] for m in after[-2:]] == [None, None]
    seqs = [m["seq"] for m in after]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [m["content"] for m in messages(api, source) if m["role"] == "user"] == [
        "one",
        "two",
        "three",
    ]

    # Its stream replays the inherited events first, once each, in seq order (the source's
    # events of turn three are not inherited: the seqs skip them).
    with open_stream(gateway_url, fid, key) as ws:
        frames: list[dict[str, Any]] = []
        stored = [e["seq"] for e in api.get(f"/v1/conversations/{fid}/events").json()["items"]]
        while len(frames) < len(stored):
            frame = json.loads(ws.recv(timeout=30))
            if frame.get("seq") is not None:
                frames.append(frame)
    assert [f["seq"] for f in frames] == stored
    assert frames[0]["inherited_from"] == source and frames[-1].get("inherited_from") is None

    # A fork of the fork at its own turn sees both lineages; forks are listed, not children.
    second = fork(api, fid, t4)
    chain = [m["content"] for m in messages(api, second["id"]) if m["role"] == "user"]
    assert chain == ["one", "two", "four"]
    assert [c["id"] for c in api.get(f"/v1/conversations/{source}/forks").json()["items"]] == [fid]
    listed = api.get(f"/v1/conversations/{fid}/forks", params={"limit": 1}).json()
    assert [c["id"] for c in listed["items"]] == [second["id"]] and listed["next_cursor"] is None
    children = api.get("/v1/conversations", params={"ancestry": "children"}).json()["items"]
    assert fid not in {c["id"] for c in children}

    # A source with forks is not deleted (they read their history from it); a fork is.
    refused = api.delete(f"/v1/conversations/{source}")
    assert refused.status_code == 409 and fid in error_of(refused)["message"]
    assert api.delete(f"/v1/conversations/{second['id']}").status_code == 200
    assert api.delete(f"/v1/conversations/{fid}").status_code == 200
    assert len(messages(api, source)) == 6
    assert api.get(f"/v1/conversations/{source}/forks").json()["items"] == []
    assert api.delete(f"/v1/conversations/{source}").status_code == 200


def test_fork_refusals_and_isolation(api: httpx.Client, stranger: httpx.Client) -> None:
    agent_id = scripted_agent(api, [{"reply": "slow", "delay_s": 3, "match": "slow"}])
    source = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    other = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    done = say(api, source, "hi")["turn_id"]
    elsewhere = say(api, other, "hi")["turn_id"]

    for body, status, fragment in (
        ({"turn_id": "turn_01NOPE"}, 400, "not in conversation"),
        ({"turn_id": elsewhere}, 400, "not in conversation"),
        ({}, 422, "turn_id"),
        ({"turn_id": done, "extra": 1}, 422, "extra"),
    ):
        refused = api.post(f"/v1/conversations/{source}/forks", json=body)
        assert refused.status_code == status, refused.text
        assert fragment in error_of(refused)["message"]

    running = api.post(f"/v1/conversations/{source}/messages", json={"content": "slow"}).json()
    busy = api.post(f"/v1/conversations/{source}/forks", json={"turn_id": running["turn_id"]})
    assert busy.status_code == 409 and "still running" in error_of(busy)["message"]

    fid = fork(api, source, done)["id"]
    for method, path in (
        ("POST", f"/v1/conversations/{source}/forks"),
        ("GET", f"/v1/conversations/{source}/forks"),
        ("GET", f"/v1/conversations/{fid}"),
        ("GET", f"/v1/conversations/{fid}/messages"),
        ("GET", f"/v1/conversations/{fid}/turns/{done}"),
    ):
        body = {"turn_id": done} if method == "POST" else None
        assert stranger.request(method, path, json=body).status_code == 404, path

    spec = api.get("/openapi.json").json()["paths"]["/v1/conversations/{conversation_id}/forks"]
    assert {"201", "400", "404", "409", "422"} <= set(spec["post"]["responses"])
    assert {"200", "404"} <= set(spec["get"]["responses"])
