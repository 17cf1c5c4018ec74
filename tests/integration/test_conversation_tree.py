"""The conversation tree over real HTTP and WebSocket on the session's Ray: forks (seed 003), turn
parents and threads (seed 004). The model is scripted; its reply shows the history context assembly
gave it (``{{history}}``)."""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from hashlib import sha256
from typing import Any

import httpx
import pytest
import ray
from websockets.sync.client import ClientConnection, connect

from cluster.naming import NAMESPACE, SCHEDULER_NAME
from core.ids import utc_now
from core.quotas import Quota
from serving.gateway.members import USER_HEADER as USER
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, error_of, http_client, unique
from tests.integration.test_gateway_stream import DONE, open_stream, scripted_agent

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


def turns_of(api: httpx.Client, conv_id: str) -> list[dict[str, Any]]:
    found = api.get(f"/v1/conversations/{conv_id}/turns")
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
        ({"turn_id": "turn_01NOPE"}, 404, "not in conversation"),
        ({"turn_id": elsewhere}, 404, "not in conversation"),
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


def test_a_user_who_forks_owns_the_fork(api: httpx.Client) -> None:
    """Forks do not copy the source's members: the forking user is the fork's one owner."""
    agent_id = scripted_agent(api, [{"reply": "ok"}])
    source = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    done = say(api, source, "hi")["turn_id"]
    assert api.put(f"/v1/conversations/{source}/members/bea", json={"level": "reader"}).is_success
    assert api.put(f"/v1/conversations/{source}/members/cal", json={"level": "manager"}).is_success
    made = api.post(
        f"/v1/conversations/{source}/forks", json={"turn_id": done}, headers={USER: "cal"}
    )
    assert made.status_code == 201, made.text
    members = api.get(f"/v1/conversations/{made.json()['id']}/members").json()["items"]
    assert [(m["user_id"], m["level"]) for m in members] == [("cal", "owner")]
    as_reader = api.post(
        f"/v1/conversations/{source}/forks", json={"turn_id": done}, headers={USER: "bea"}
    )
    assert as_reader.status_code == 403, as_reader.text


def test_parent_turns_and_threads(api: httpx.Client, stranger: httpx.Client) -> None:
    agent_id = scripted_agent(api, [{"reply": "ok"}])
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    first = say(api, conv, "one")
    t1 = first["turn_id"]
    t2 = say(api, conv, "two")["turn_id"]
    t3 = say(api, conv, "three", reply_to_message_id=first["message_id"])["turn_id"]
    turns = {t["id"]: t for t in api.get(f"/v1/conversations/{conv}/turns").json()["items"]}
    assert [turns[t]["parent_turn_id"] for t in (t1, t2, t3)] == [None, t1, t1]

    thread = api.get(f"/v1/threads/{t3}").json()
    assert thread["ancestry"] == [t1, t3] and thread["depth"] == 2
    assert [m["content"] for m in thread["messages"]] == ["one", "ok", "three", "ok"]
    assert thread["total_tokens"] == sum(
        turns[t]["usage"]["prompt_tokens"] + turns[t]["usage"]["completion_tokens"]
        for t in (t1, t3)
    )
    assert thread["total_tokens"] > 0
    assert thread["has_children"] is False and thread["persona"]["system_prompt"]
    assert api.get(f"/v1/threads/{t1}").json()["has_children"] is True  # t2 and t3 continue it
    assert api.get(f"/v1/threads/{t2}").json()["has_children"] is False

    # A fork's turn: its thread crosses into the source; the fork turn now has children.
    fid = fork(api, conv, t2)["id"]
    assert api.get(f"/v1/threads/{t2}").json()["has_children"] is True
    t4 = say(api, fid, "four")["turn_id"]
    crossing = api.get(f"/v1/threads/{t4}").json()
    assert crossing["ancestry"] == [t1, t2, t4] and crossing["depth"] == 3
    assert crossing["ancestry_conversations"] == [conv, conv, fid]
    assert [m["content"] for m in crossing["messages"] if m["role"] == "user"] == [
        "one",
        "two",
        "four",
    ]

    assert api.get("/v1/threads/turn_01NOPE").status_code == 404
    assert stranger.get(f"/v1/threads/{t4}").status_code == 404
    spec = api.get("/openapi.json").json()["paths"]["/v1/threads/{turn_id}"]["get"]
    assert {"200", "401", "404"} <= set(spec["responses"])


def test_backward_paging_and_cursors(api: httpx.Client) -> None:
    agent_id = scripted_agent(api, [{"reply": "ok"}])
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    for word in ("one", "two", "three"):
        say(api, conv, word)
    for kind, limit in (("messages", 2), ("events", 3)):
        path = f"/v1/conversations/{conv}/{kind}"
        forward = [e["seq"] for e in api.get(path).json()["items"]]
        page = api.get(path, params={"tail": "true", "limit": limit}).json()
        backward = [[e["seq"] for e in page["items"]]]
        while page["older_before_seq"] is not None:
            page = api.get(path, params={"before_seq": page["older_before_seq"], "limit": limit})
            page = page.json()
            backward.append([e["seq"] for e in page["items"]])
        assert all(len(p) == limit for p in backward[:-1]) and backward[0] == forward[-limit:]
        assert [seq for p in reversed(backward) for seq in p] == forward
        # Together the controls bound a range, paged backward (the newest entries of it).
        low, high = forward[0], forward[-1]
        ranged = api.get(path, params={"after_seq": low, "before_seq": high, "limit": limit})
        inside = [s for s in forward if low < s < high]
        assert [e["seq"] for e in ranged.json()["items"]] == inside[-limit:]
        tail_after = api.get(path, params={"after_seq": low, "tail": "true", "limit": 1000})
        assert [e["seq"] for e in tail_after.json()["items"]] == forward[1:]
        both = api.get(path, params={"before_seq": high, "tail": "true", "limit": limit})
        assert [e["seq"] for e in both.json()["items"]] == [s for s in forward if s < high][-limit:]

    for _ in range(2):
        assert api.post("/v1/conversations", json={}).status_code == 201
    first = api.get("/v1/conversations", params={"limit": 1}).json()
    assert first["next_cursor"] is not None
    follow = api.get("/v1/conversations", params={"limit": 1, "after_cursor": first["next_cursor"]})
    assert follow.status_code == 200 and follow.json()["items"] != first["items"]
    body = first["next_cursor"].split(".")[0]
    # Not shaped like a cursor: 422 (the parameter's pattern); shaped like one but not signed by
    # this API: 404 (no page starts there).
    for forged, status in ((body, 422), (f"{body}.AAAAAAAAAAAAAAAAAAAAAA", 404)):
        refused = api.get("/v1/conversations", params={"after_cursor": forged})
        assert refused.status_code == status and "after_cursor" in error_of(refused)["message"]
    spec = api.get("/openapi.json").json()["paths"]["/v1/conversations/{conversation_id}/messages"]
    assert {"before_seq", "tail", "after_seq"} <= {p["name"] for p in spec["get"]["parameters"]}


def test_message_source_and_model_override(gateway_url: str, api: httpx.Client, key: str) -> None:
    agent_id = scripted_agent(api, [{"reply": "from the persona's model"}])
    other = unique("scripted")
    profile = {"provider": "scripted", "model": "other", "script": [{"reply": "from the other"}]}
    assert api.put(f"/v1/model-profiles/{other}", json=profile).status_code == 200
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]

    override = {"model_profile_id": other, "temperature": 0.5, "max_tokens": 7}
    first = say(api, conv, "hi", source="cron", model=override)
    plain = say(api, conv, "again")
    found = messages(api, conv)
    assert [(m["role"], m["source"], m["content"]) for m in found] == [
        ("user", "cron", "hi"),
        ("agent", "agent", "from the other"),
        ("user", "human", "again"),
        ("agent", "agent", "from the persona's model"),
    ]
    turn = api.get(f"/v1/conversations/{conv}/turns/{first['turn_id']}").json()
    assert turn["source"] == "cron"
    assert turn["model"]["override"] == {**override, "thinking": None}
    used = turn["model"]["used"]
    assert (used["model_profile_id"], used["model"], used["temperature"], used["max_tokens"]) == (
        other,
        "other",
        0.5,
        7,
    )
    listed = {t["id"]: t for t in api.get(f"/v1/conversations/{conv}/turns").json()["items"]}
    assert listed[first["turn_id"]]["model"]["used"]["model_profile_id"] == other
    assert listed[plain["turn_id"]]["model"] is None

    with open_stream(gateway_url, conv, key) as ws:
        ws.send(json.dumps({"type": "message", "content": "hook", "source": "webhook"}))
        frames = [json.loads(ws.recv(timeout=30))]
        while frames[-1]["type"] != "ack":
            frames.append(json.loads(ws.recv(timeout=30)))
        turn_id = frames[-1]["turn_id"]
        while not (frames[-1]["type"] == "turn.completed" and frames[-1]["turn_id"] == turn_id):
            frames.append(json.loads(ws.recv(timeout=30)))
    assert messages(api, conv, tail="true", limit=2)[0]["source"] == "webhook"

    for body, status, fragment in (
        ({"content": "x", "source": "agent"}, 422, "body.source"),
        ({"content": "x", "model": {"model_profile_id": "no-such-profile"}}, 404, "not found"),
        ({"content": "x", "model": {"temperature": 5}}, 422, "body.model.temperature"),
        ({"content": "x", "model": {"top_k": 5}}, 422, "body.model.top_k"),
    ):
        refused = api.post(f"/v1/conversations/{conv}/messages", json=body)
        assert refused.status_code == status, refused.text
        assert fragment in error_of(refused)["message"]


def test_sessions_and_routing(api: httpx.Client, stranger: httpx.Client) -> None:
    profile_id, persona_id = unique("scripted"), unique("persona")
    profile = {"provider": "scripted", "model": "s", "script": [{"reply": "ok"}]}
    assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
    persona = {"system_prompt": "You are a test agent.", "model_profile_id": profile_id}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    main = f"{persona_id}:main"

    def send(to: dict[str, str], content: str = "hi") -> dict[str, Any]:
        sent = api.post("/v1/messages", json={"content": content, "to": to})
        assert sent.status_code == 202, sent.text
        return dict(sent.json())

    first = send({"persona": persona_id})
    assert first["session"] == main and first["forked"] is False
    conv = first["conversation_id"]
    assert send({"persona": persona_id})["conversation_id"] == conv  # made once, then reused

    # Messages queued for one session all land on its head, in order, never forking.
    with ThreadPoolExecutor(4) as pool:
        acks = list(pool.map(lambda n: send({"session": main}, f"queued {n}"), range(4)))
    assert {a["conversation_id"] for a in acks} == {conv}
    wait_for(
        lambda: all(
            t["status"] != "active"
            for t in api.get(f"/v1/conversations/{conv}/turns").json()["items"]
        ),
        timeout=60,
    )
    turns = api.get(f"/v1/conversations/{conv}/turns").json()["items"]
    assert [t["parent_turn_id"] for t in turns] == [None] + [t["id"] for t in turns[:-1]]
    session = api.get(f"/v1/sessions/{main}").json()
    assert session["conversation_id"] == conv and session["head_turn_id"] == turns[-1]["id"]

    # To a thread: its conversation's tip appends; an earlier turn forks.
    tip = send({"thread": turns[-1]["id"]})
    assert (tip["conversation_id"], tip["forked"]) == (conv, False)
    wait_for(lambda: api.get(f"/v1/sessions/{main}").json()["head_turn_id"] == tip["turn_id"])
    branched = send({"thread": turns[1]["id"]})
    assert branched["forked"] is True and branched["conversation_id"] != conv
    fork_row = api.get(f"/v1/conversations/{branched['conversation_id']}").json()
    assert fork_row["forked_at_turn_id"] == turns[1]["id"]
    turn = api.get(f"/v1/conversations/{branched['conversation_id']}/turns/{branched['turn_id']}")
    assert turn.json()["parent_turn_id"] == turns[1]["id"]

    # Labels: create for a conversation or with an agent, list, delete (the conversation stays).
    made = api.put("/v1/sessions/notes", json={"conversation_id": conv})
    assert made.status_code == 201 and made.json()["conversation_id"] == conv
    assert api.put("/v1/sessions/notes", json={"conversation_id": conv}).status_code == 409
    agent_id = api.get("/v1/agents").json()["items"][0]["id"]
    fresh = api.put("/v1/sessions/work", json={"agent_id": agent_id})
    assert fresh.status_code == 201 and fresh.json()["head_turn_id"] is None
    assert api.put("/v1/sessions/x", json={}).status_code == 422
    labels = [s["label"] for s in api.get("/v1/sessions").json()["items"]]
    assert labels == sorted([main, "notes", "work"])
    page = api.get("/v1/sessions", params={"limit": 1}).json()
    assert [s["label"] for s in page["items"]] == [labels[0]] and page["next_after"] == labels[0]
    assert api.delete("/v1/sessions/notes").json() == {"deleted": ["notes"]}
    assert api.get("/v1/sessions/notes").status_code == 404
    assert api.get(f"/v1/conversations/{conv}").status_code == 200

    for to, status in (
        ({}, 422),
        ({"thread": "t", "session": "s"}, 422),
        ({"persona": "nope"}, 404),
    ):
        refused = api.post("/v1/messages", json={"content": "x", "to": to})
        assert refused.status_code == status, refused.text

    # Another client: 404 for this client's sessions and threads; its own persona session.
    assert stranger.get(f"/v1/sessions/{main}").status_code == 404
    assert stranger.delete(f"/v1/sessions/{main}").status_code == 404
    for to in ({"session": main}, {"thread": turns[0]["id"]}):
        assert stranger.post("/v1/messages", json={"content": "x", "to": to}).status_code == 404
    # The persona is in the first client's own library (issue 13): the other client cannot see it.
    theirs = stranger.post("/v1/messages", json={"content": "x", "to": {"persona": persona_id}})
    assert theirs.status_code == 404 and "not found" in error_of(theirs)["message"]

    paths = api.get("/openapi.json").json()["paths"]
    assert {"201", "400", "409", "422"} <= set(paths["/v1/sessions/{label}"]["put"]["responses"])
    assert {"202", "400", "404", "422"} <= set(paths["/v1/messages"]["post"]["responses"])


class Socket:
    """A client's WebSocket that keeps every frame it read: a turn's events may come before the
    ack of the message that started it."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []

    def until(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first frame ``done`` accepts, read so far or next."""
        for frame in self.frames:
            if done(frame):
                return frame
        while True:
            self.frames.append(json.loads(self.ws.recv(timeout=60)))
            if done(self.frames[-1]):
                return self.frames[-1]

    def reply(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send a frame; its answer (the ack, error or pong echoing its id)."""
        self.ws.send(json.dumps(frame))
        return self.until(lambda f: f.get("id") == frame["id"] and f["seq"] is None)

    def turn(self, turn_id: str) -> list[dict[str, Any]]:
        """The frames of turn ``turn_id``, up to its end."""
        self.until(lambda f: f["type"] in DONE and f.get("turn_id") == turn_id)
        return [f for f in self.frames if f.get("turn_id") == turn_id or _message_of(f, turn_id)]


def _message_of(frame: dict[str, Any], turn_id: str) -> bool:
    return frame["type"] == "message" and frame["message"]["turn_id"] == turn_id


def user_stream(gateway_url: str, conv_id: str, key: str, user: str) -> ClientConnection:
    ws_url = gateway_url.replace("http://", "ws://")
    return connect(
        f"{ws_url}/v1/conversations/{conv_id}/stream?user_id={user}",
        additional_headers={"Authorization": f"Bearer {key}"},
        proxy=None,
        open_timeout=30,
    )


def test_stream_message_frames_route_and_override_the_model(
    gateway_url: str, api: httpx.Client, key: str, stranger: httpx.Client
) -> None:
    """The stream's message frame routes (``to``) and overrides the model (``model``) as REST
    does; the ack says where the message went, and another conversation's turn is followed on
    that conversation's own stream."""
    persona_id = scripted_persona(api)
    agent_id = scripted_agent(api, ECHO)
    other = unique("scripted")
    profile = {"provider": "scripted", "model": "other", "script": [{"reply": "from the other"}]}
    assert api.put(f"/v1/model-profiles/{other}", json=profile).status_code == 200
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    t1 = say(api, conv, "one")["turn_id"]
    tip = say(api, conv, "two")["turn_id"]
    assert api.put("/v1/sessions/here", json={"conversation_id": conv}).status_code == 201
    override = {"model_profile_id": other, "temperature": 0.5}

    def message(content: str, id_: str, **extra: Any) -> dict[str, Any]:
        return {"type": "message", "content": content, "id": id_, **extra}

    with open_stream(gateway_url, conv, key) as raw:
        ws = Socket(raw)
        ws.until(lambda f: f["type"] == "subscribed")
        # Routed to this conversation's tip, with a model override: it is answered here.
        here = ws.reply(message("three", "r1", to={"thread": tip}, model=override))
        assert here["type"] == "ack", here
        assert (here["conversation_id"], here["forked"], here["streamed_here"]) == (
            conv,
            False,
            True,
        )
        answered = ws.turn(here["turn_id"])
        assert answered[-1]["type"] == "turn.completed"
        assert [f["message"]["content"] for f in answered if f["type"] == "message"] == [
            "three",
            "from the other",
        ]
        turn = api.get(f"/v1/conversations/{conv}/turns/{here['turn_id']}").json()
        assert turn["parent_turn_id"] == tip
        assert turn["model"]["override"] == {**override, "max_tokens": None, "thinking": None}
        assert turn["model"]["used"]["model_profile_id"] == other

        # To a session naming this conversation: here too; without ``to``: here, as before.
        by_label = ws.reply(message("four", "r2", to={"session": "here"}))
        assert (by_label["session"], by_label["streamed_here"]) == ("here", True)
        ws.turn(by_label["turn_id"])
        plain = ws.reply(message("five", "r3"))
        assert (plain["conversation_id"], plain["forked"], plain["session"]) == (conv, False, None)
        ws.turn(plain["turn_id"])

        # To an earlier turn: a fork, not followed here; the fork's own stream carries the turn
        # from the ack's message_seq on.
        forked = ws.reply(message("six", "r4", to={"thread": t1}))
        fork_id = forked["conversation_id"]
        assert fork_id != conv and forked["forked"] is True and forked["streamed_here"] is False
        with open_stream(gateway_url, fork_id, key, after_seq=forked["message_seq"] - 1) as fork:
            followed = Socket(fork)
            followed.turn(forked["turn_id"])
        durable = [f for f in followed.frames if f["seq"] is not None]
        assert durable[0]["type"] == "message"
        assert durable[0]["message"]["id"] == forked["message_id"]
        assert durable[-1]["type"] == "turn.completed"
        answer = [f["message"]["content"] for f in durable if f["type"] == "message"][-1]
        assert "one" in answer and "six" in answer and "two" not in answer
        assert api.get(f"/v1/conversations/{fork_id}").json()["forked_at_turn_id"] == t1
        assert not any(f.get("turn_id") == forked["turn_id"] for f in ws.frames[:-1])

        # To a persona: its main session, made on first use.
        persona = ws.reply(message("seven", "r5", to={"persona": persona_id}))
        assert persona["session"] == f"{persona_id}:main" and persona["streamed_here"] is False
        session = api.get(f"/v1/sessions/{persona_id}:main").json()
        assert session["conversation_id"] == persona["conversation_id"]

        # Bad frames: a precise error frame each, echoing the frame's id; the stream goes on.
        for n, (extra, code, fragment) in enumerate(
            (
                ({"to": {}}, "INVALID_INPUT", "exactly one of thread, session or persona"),
                ({"to": {"thread": tip, "persona": persona_id}}, "INVALID_INPUT", "exactly one"),
                ({"to": {"thread": "turn_01NOPE"}}, "NOT_FOUND", "thread turn_01NOPE not found"),
                ({"to": {"session": "nope"}}, "NOT_FOUND", "session nope not found"),
                ({"to": {"persona": "nope"}}, "NOT_FOUND", "persona nope not found"),
                ({"to": {"conversation": conv}}, "INVALID_INPUT", "to.conversation"),
                ({"model": {"model_profile_id": "no-such"}}, "NOT_FOUND", "no-such not found"),
                ({"model": {"temperature": 5}}, "INVALID_INPUT", "model.temperature"),
                ({"to": {"persona": persona_id}, "model": {"top_k": 1}}, "INVALID_INPUT", "top_k"),
                ({"source": "agent"}, "INVALID_INPUT", "source"),
            )
        ):
            refused = ws.reply(message("x", f"bad-{n}", **extra))
            assert refused["type"] == "error", (extra, refused)
            assert refused["error"]["code"] == code, (extra, refused)
            assert fragment in refused["error"]["message"], (extra, refused)
        assert ws.reply({"type": "ping", "id": "alive"})["type"] == "pong"

    # Another client's stream cannot route into this client's threads or sessions.
    stranger_conv = stranger.post("/v1/conversations", json={}).json()["id"]
    stranger_key = stranger.headers["Authorization"].removeprefix("Bearer ")
    with open_stream(gateway_url, stranger_conv, stranger_key) as raw:
        ws = Socket(raw)
        for n, to in enumerate(({"thread": tip}, {"thread": t1}, {"session": "here"})):
            refused = ws.reply(message("x", f"s{n}", to=to))
            assert refused["type"] == "error" and refused["error"]["code"] == "NOT_FOUND", refused
    assert len(api.get(f"/v1/conversations/{conv}/forks").json()["items"]) == 1


def test_routing_acts_as_the_user(gateway_url: str, api: httpx.Client, key: str) -> None:
    """With an acting user, a routed message (REST or stream) is checked where it lands."""
    agent_id = scripted_agent(api, [{"reply": "ok"}])
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    t1 = say(api, conv, "one")["turn_id"]
    tip = say(api, conv, "two")["turn_id"]
    for user, level in (("rae", "reader"), ("wes", "writer"), ("max", "manager")):
        grant = api.put(f"/v1/conversations/{conv}/members/{user}", json={"level": level})
        assert grant.status_code == 200, grant.text

    def send(user: str, to: dict[str, str]) -> httpx.Response:
        return api.post("/v1/messages", json={"content": "hi", "to": to}, headers={USER: user})

    for user, to, status in (
        ("eve", {"thread": tip}, 404),  # not a member: to eve there is no such thread
        ("rae", {"thread": tip}, 403),  # a reader may not post
        ("wes", {"thread": t1}, 403),  # forking needs what POST .../forks needs: manager
    ):
        refused = send(user, to)
        assert refused.status_code == status, (user, refused.text)
    assert api.get(f"/v1/conversations/{conv}/forks").json()["items"] == []
    appended = send("wes", {"thread": tip})
    assert appended.status_code == 202 and appended.json()["conversation_id"] == conv
    fork = send("max", {"thread": t1})
    assert fork.status_code == 202 and fork.json()["forked"] is True
    members = api.get(f"/v1/conversations/{fork.json()['conversation_id']}/members").json()
    assert [(m["user_id"], m["level"]) for m in members["items"]] == [("max", "owner")]

    # On the stream: a reader of the socket's conversation may route to where it may write.
    mine = api.post("/v1/conversations", json={"agent_id": agent_id}, headers={USER: "rae"})
    label = f"rae-{unique('s')}"
    made = api.put(f"/v1/sessions/{label}", json={"conversation_id": mine.json()["id"]})
    assert made.status_code == 201, made.text
    with user_stream(gateway_url, conv, key, "rae") as raw:
        ws = Socket(raw)
        here = ws.reply({"type": "message", "content": "x", "id": "a"})
        assert here["error"]["code"] == "PERMISSION_DENIED", here
        to = {"session": label}
        mismatch = ws.reply(
            {"type": "message", "content": "x", "to": to, "user_id": "wes", "id": "b"}
        )
        assert mismatch["error"]["code"] == "CONFLICT", mismatch
        there = ws.reply({"type": "message", "content": "x", "to": to, "id": "c"})
        assert there["type"] == "ack" and there["streamed_here"] is False, there
        assert there["conversation_id"] == mine.json()["id"]


def test_routing_counts_the_conversations_it_makes(gateway_url: str, ray_cluster: Cluster) -> None:
    """A fork or a main session that routing makes is one more conversation for the quota."""

    client_id, limited_key = make_client(ray_cluster.store, "limited")
    ray_cluster.store.quotas.put(client_id, Quota(conversations=1), utc_now())
    with http_client(gateway_url, limited_key) as limited:
        agent_id = scripted_agent(limited, [{"reply": "ok"}])
        persona_id = scripted_persona(limited)
        conv = limited.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
        t1 = say(limited, conv, "one")["turn_id"]
        tip = say(limited, conv, "two")["turn_id"]
        for to in ({"thread": t1}, {"persona": persona_id}):
            refused = limited.post("/v1/messages", json={"content": "x", "to": to})
            assert refused.status_code == 429, refused.text
            assert "conversations stored" in error_of(refused)["message"]
        with open_stream(gateway_url, conv, limited_key) as raw:
            ws = Socket(raw)
            over = ws.reply({"type": "message", "content": "x", "to": {"thread": t1}, "id": "f"})
            assert over["error"]["code"] == "QUOTA_EXCEEDED", over
            at_tip = ws.reply({"type": "message", "content": "x", "to": {"thread": tip}, "id": "t"})
            assert at_tip["type"] == "ack" and at_tip["forked"] is False, at_tip
        assert limited.get(f"/v1/conversations/{conv}/forks").json()["items"] == []
        assert limited.get(f"/v1/sessions/{persona_id}:main").status_code == 404


def scripted_persona(api: httpx.Client) -> str:
    profile_id, persona_id = unique("scripted"), unique("persona")
    profile = {"provider": "scripted", "model": "s", "script": [{"reply": "ok"}]}
    assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
    persona = {"system_prompt": "You are a test agent.", "model_profile_id": profile_id}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    return persona_id


def test_webhooks_are_signed_and_routed(
    gateway_url: str, api: httpx.Client, stranger: httpx.Client
) -> None:
    persona_id = scripted_persona(api)
    made = api.post("/v1/hooks", json={"route": {"persona": persona_id}, "title": "ci"})
    assert made.status_code == 201, made.text
    hook = made.json()
    secret, hook_id = hook["secret"], hook["id"]
    assert hook["route"] == {"kind": "persona", "target": persona_id}
    assert "secret" not in api.get(f"/v1/hooks/{hook_id}").json()
    assert [h["id"] for h in api.get("/v1/hooks").json()["items"]] == [hook_id]

    def deliver(body: bytes, at: float | None = None, key: str = secret, **headers: str) -> Any:
        stamp = str(int(time.time() if at is None else at))
        signed = "sha256=" + hmac.new(key.encode(), f"{stamp}.".encode() + body, sha256).hexdigest()
        sent = {"X-Wonder-Timestamp": stamp, "X-Wonder-Signature": signed, **headers}
        with httpx.Client(base_url=gateway_url, trust_env=False, timeout=30) as anonymous:
            return anonymous.post(f"/v1/hooks/{hook_id}", content=body, headers=sent)

    accepted = deliver(b'{"content": "build 42 failed"}')
    assert accepted.status_code == 202, accepted.text
    routed = accepted.json()
    assert routed["session"] == f"{persona_id}:main" and routed["forked"] is False
    stored = messages(api, routed["conversation_id"])
    assert (stored[0]["content"], stored[0]["source"], stored[0]["author"]) == (
        "build 42 failed",
        "webhook",
        f"hook:{hook_id}",
    )
    assert deliver(b"plain text").status_code == 202  # a non-JSON body is the message itself

    # A repeat inside the window (same timestamp, body, signature) is answered with the first
    # delivery's result and starts no second turn; another body is another delivery.
    stamp = time.time()
    once = deliver(b"deploy 7 done", at=stamp)
    again = deliver(b"deploy 7 done", at=stamp)
    assert once.status_code == 202 and again.status_code == 200, again.text
    assert once.json()["replayed"] is False
    assert again.json() == {**once.json(), "replayed": True}
    assert deliver(b"deploy 8 done", at=stamp).status_code == 202
    conv = routed["conversation_id"]
    wait_for(lambda: all(t["status"] != "active" for t in turns_of(api, conv)), timeout=60)
    sent = [m["content"] for m in messages(api, conv) if m["role"] == "user"]
    assert sent == ["build 42 failed", "plain text", "deploy 7 done", "deploy 8 done"]
    assert [t["id"] for t in turns_of(api, conv)][2] == once.json()["turn_id"]

    for response, fragment in (
        (deliver(b"x", key="0" * 64), "does not match"),
        (deliver(b"x", at=time.time() - 3600), "replay window"),
        (deliver(b"x", at=time.time() + 3600), "replay window"),
        (deliver(b"x", **{"X-Wonder-Signature": "sha256=00"}), "does not match"),
    ):
        assert response.status_code == 401 and fragment in error_of(response)["message"]
    with httpx.Client(base_url=gateway_url, trust_env=False) as anonymous:
        unsigned = anonymous.post(f"/v1/hooks/{hook_id}", content=b"x")
        assert unsigned.status_code == 401
        assert anonymous.post("/v1/hooks/hook_01NOPE", content=b"x").status_code == 404

    # A rule must route to something of this client's now (checked when the hook is made).
    thread = stored[0]["turn_id"]
    for route, fragment in (
        ({"session": "nope"}, "session nope not found"),
        ({"thread": "turn_01NOPE"}, "thread turn_01NOPE not found"),
        ({"persona": "nope"}, "persona nope not found"),
    ):
        refused = api.post("/v1/hooks", json={"route": route})
        assert refused.status_code == 404 and fragment in error_of(refused)["message"]
    theirs = stranger.post("/v1/hooks", json={"route": {"thread": thread}})
    assert theirs.status_code == 404 and "not found" in error_of(theirs)["message"]
    assert api.post("/v1/hooks", json={"route": {"thread": thread}}).status_code == 201

    assert stranger.get(f"/v1/hooks/{hook_id}").status_code == 404
    assert stranger.delete(f"/v1/hooks/{hook_id}").status_code == 404
    assert stranger.get("/v1/hooks").json()["items"] == []
    assert api.delete(f"/v1/hooks/{hook_id}").json() == {"deleted": [hook_id]}
    assert deliver(b"x").status_code == 404
    paths = api.get("/openapi.json").json()["paths"]
    assert {"200", "202", "401", "404", "409"} <= set(
        paths["/v1/hooks/{hook_id}"]["post"]["responses"]
    )


def test_cron_trigger_fires_once_per_due_time_across_scheduler_restarts(
    api: httpx.Client, stranger: httpx.Client, ray_cluster: Cluster
) -> None:
    persona_id = scripted_persona(api)
    body = {
        "schedule": "0 3 * * *",
        "template": "tick {{due_at}}",
        "route": {"persona": persona_id},
    }
    made = api.post("/v1/triggers", json=body)
    assert made.status_code == 201, made.text
    trigger_id = made.json()["id"]
    assert made.json()["next_due"] > utc_now().isoformat()
    store = ray_cluster.store
    stored = store.triggers.get(trigger_id)

    def make_due(seconds_ago: int, after: str | None = None) -> str:
        """Its time has come (as if the clock had reached it): due ``seconds_ago``, and a second
        at least after ``after`` (a due time of its own, in order, even when the clock has moved
        on by less than the two apart; it is due then at most a second from now)."""
        due = utc_now().replace(microsecond=0) - timedelta(seconds=seconds_ago)
        if after is not None:
            due = max(due, datetime.fromisoformat(after) + timedelta(seconds=1))
        store.triggers.save(stored.model_copy(update={"next_due": due}))
        return due.isoformat()

    def sent() -> list[tuple[str, str]]:
        session = api.get(f"/v1/sessions/{persona_id}:main").json()
        if "conversation_id" not in session:
            return []
        found = messages(api, session["conversation_id"])
        return [(m["content"], m["source"]) for m in found if m["role"] == "user"]

    first = make_due(1)
    wait_for(lambda: store.triggers.fired(trigger_id) == [first], timeout=30)
    wait_for(lambda: sent() == [(f"tick {first}", "cron")], timeout=30)  # posted after the claim

    # Kill the scheduler; Ray restarts it. Even if the trigger is found due at the time already
    # fired (as if the move to its next time had been lost), the restarted one does not fire it
    # again; it moves on, and fires the next due time once.
    ray.kill(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE), no_restart=False)
    make_due_again = stored.model_copy(update={"next_due": datetime.fromisoformat(first)})
    store.triggers.save(make_due_again)
    wait_for(lambda: store.triggers.get(trigger_id).next_due.isoformat() != first, timeout=60)
    assert store.triggers.fired(trigger_id) == [first]
    second = make_due(2, after=first)
    wait_for(lambda: store.triggers.fired(trigger_id) == [first, second], timeout=60)

    expected = [(f"tick {first}", "cron"), (f"tick {second}", "cron")]
    try:
        wait_for(lambda: sent() == expected, timeout=30)
    except AssertionError:
        scheduler = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        raise AssertionError(ray.get(scheduler.status.remote())) from None
    assert api.get(f"/v1/triggers/{trigger_id}").json()["fired"] == [first, second]

    bad = api.post("/v1/triggers", json={**body, "schedule": "61 * * * *"})
    assert bad.status_code == 422 and "body.schedule" in error_of(bad)["message"]
    nowhere = api.post("/v1/triggers", json={**body, "route": {"session": "nope"}})
    assert nowhere.status_code == 404 and "session nope not found" in error_of(nowhere)["message"]
    assert stranger.get(f"/v1/triggers/{trigger_id}").status_code == 404
    assert stranger.delete(f"/v1/triggers/{trigger_id}").status_code == 404
    assert api.delete(f"/v1/triggers/{trigger_id}").json() == {"deleted": [trigger_id]}
    assert api.get(f"/v1/triggers/{trigger_id}").status_code == 404
