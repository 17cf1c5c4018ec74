"""Routing over HTTP (the gateway on the session's Ray, real conversation actors, the real
embedder): smart routing to the best-matching conversation with the candidates' scores in the
answer and on the message, its fallback and its refusal, a permissions override that takes a
tool away for one turn, and thinking in a turn's model config."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile, task_tool
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(420)

SCRIPT = [
    {"match": "use the lookup", "tool_calls": [{"name": "lookup", "arguments": {}}]},
    {"match": "", "reply": "noted: {{last_user}}"},
]


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture(scope="module")
def tenant(gateway_url: str, ray_cluster: Cluster) -> Iterator[dict[str, Any]]:
    store = ray_cluster.store
    client_id, key = make_client(store, "router")
    lookup = task_tool(
        store, "lookup", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    profile = scripted_profile(store, SCRIPT)
    agent = make_agent(store, client_id, profile, [lookup])
    with http_client(gateway_url, key) as api:
        yield {"api": api, "agent": agent, "client_id": client_id, "profile": profile}


def wait_turn(api: httpx.Client, conv: str, turn_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        turn = dict(api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json())
        return turn if turn["status"] != "active" else None

    return wait_for(ended, timeout=90, interval=0.2)


def conversation_about(api: httpx.Client, agent_id: str, title: str, *said: str) -> str:
    conv = str(
        api.post("/v1/conversations", json={"agent_id": agent_id, "title": title}).json()["id"]
    )
    for content in said:
        ack = api.post(f"/v1/conversations/{conv}/messages", json={"content": content}).json()
        wait_turn(api, conv, ack["turn_id"])
    return conv


def test_smart_routing_picks_the_matching_conversation(
    tenant: dict[str, Any], embedder_app: str
) -> None:
    api, agent = tenant["api"], tenant["agent"]
    databases = conversation_about(
        api, agent.id, "ledger", "We picked PostgreSQL 16 for the ledger service database."
    )
    lunch = conversation_about(api, agent.id, "food", "Lunch on Friday is pizza from Luigi's.")
    body = {
        "content": "Which PostgreSQL version does the ledger database run?",
        "to": {"auto": True},
    }
    routed = api.post("/v1/messages", json=body)
    assert routed.status_code == 202, routed.text
    answer = routed.json()
    routing = answer["routing"]
    assert (
        answer["conversation_id"] == databases and routing["chosen"]["conversation_id"] == databases
    )
    scores = {c["conversation_id"]: c["score"] for c in routing["candidates"]}
    assert scores[databases] > scores[lunch] and routing["fallback"] is False
    assert routing["min_score"] == 0.35
    wait_turn(api, databases, answer["turn_id"])
    listed = api.get(f"/v1/conversations/{databases}/messages").json()["items"]
    [sent] = [m for m in listed if m["id"] == answer["message_id"]]
    assert sent["route"]["decision"]["chosen"]["conversation_id"] == databases
    assert sent["route"]["decision"]["candidates"] == routing["candidates"]


def test_smart_routing_falls_back_or_refuses(tenant: dict[str, Any], embedder_app: str) -> None:
    api, agent = tenant["api"], tenant["agent"]
    conversation_about(api, agent.id, "ops", "The deploy uses a blue-green rollout.")
    strict = {"min_score": 0.99}
    body = {"content": "Tell me about medieval falconry.", "to": {"auto": strict}}
    refused = api.post("/v1/messages", json=body)
    assert refused.status_code == 409
    assert "no conversation matches this message" in refused.json()["error"]["message"]
    session = f"fallback-{agent.id.lower()[-8:]}"
    made = api.put(f"/v1/sessions/{session}", json={"agent_id": agent.id})
    assert made.status_code == 201, made.text
    body["to"] = {"auto": {**strict, "fallback": {"session": session}}}
    routed = api.post("/v1/messages", json=body)
    assert routed.status_code == 202, routed.text
    answer = routed.json()
    assert answer["session"] == session and answer["routing"]["fallback"] is True
    assert answer["routing"]["chosen"] is None and answer["routing"]["candidates"]
    for bad in ({"auto": False}, {"auto": True, "session": session}, {"auto": {"min_score": 2}}):
        assert api.post("/v1/messages", json={"content": "x", "to": bad}).status_code == 422
    # Triggers and hooks keep their own targets: auto is not one of them.
    trigger = {"schedule": "0 3 * * *", "template": "t", "route": {"auto": True}}
    assert api.post("/v1/triggers", json=trigger).status_code == 422


def test_a_permissions_override_takes_a_tool_away_for_one_turn(tenant: dict[str, Any]) -> None:
    api, agent = tenant["api"], tenant["agent"]
    conv = conversation_about(api, agent.id, "tools")
    denied = {
        "content": "please use the lookup tool",
        "permissions": {"tools": {"deny": ["lookup"]}},
    }
    first = api.post(f"/v1/conversations/{conv}/messages", json=denied).json()
    refused = wait_turn(api, conv, first["turn_id"])
    [move] = [m for m in refused["moves"] if m["tool_call"]]
    assert move["tool_result"]["success"] is False
    assert move["tool_result"]["error"]["code"] == "PERMISSION_DENIED"
    # The next message has no override: the persona's tools again.
    second = api.post(
        f"/v1/conversations/{conv}/messages", json={"content": "please use the lookup"}
    )
    allowed = wait_turn(api, conv, second.json()["turn_id"])
    [move] = [m for m in allowed["moves"] if m["tool_call"]]
    assert move["tool_result"]["success"] is True
    # An allow list cannot grant what the persona lacks; a routed message carries one too.
    widen = {"tools": {"allow": ["shell", "lookup"]}}
    body = {"content": "please use the lookup", "to": {"thread": second.json()["turn_id"]}}
    routed = api.post("/v1/messages", json={**body, "permissions": widen}).json()
    turn = wait_turn(api, routed["conversation_id"], routed["turn_id"])
    [move] = [m for m in turn["moves"] if m["tool_call"]]
    assert move["tool_result"]["success"] is True
    messages = api.get(f"/v1/conversations/{conv}/messages").json()["items"]
    [carried] = [m for m in messages if m["id"] == routed["message_id"]]
    assert carried["route"]["permissions"] == {"tools": {**widen["tools"], "deny": []}}


def test_thinking_in_a_turns_model_config(tenant: dict[str, Any]) -> None:
    api, agent = tenant["api"], tenant["agent"]
    conv = conversation_about(api, agent.id, "thinking")
    think = {"content": "hello", "model": {"thinking": {"effort": "high"}}}
    refused = api.post(f"/v1/conversations/{conv}/messages", json=think)
    assert refused.status_code == 400
    assert "does not support thinking" in refused.json()["error"]["message"]
    profile_id = f"thinker-{agent.id.lower()[-10:]}"
    put = api.put(
        f"/v1/model-profiles/{profile_id}",
        json={"provider": "scripted", "thinking": "reasoning_effort", "script": [{"reply": "hm"}]},
    )
    assert put.status_code in (200, 201), put.text
    think["model"] = {"model_profile_id": profile_id, "thinking": {"effort": "high"}}
    accepted = api.post(f"/v1/conversations/{conv}/messages", json=think)
    assert accepted.status_code == 202, accepted.text
    turn = wait_turn(api, conv, accepted.json()["turn_id"])
    assert turn["status"] == "completed"
    assert turn["model"]["used"]["thinking"] == {"enabled": True, "effort": "high"}
    assert turn["model"]["used"]["model_profile_id"] == profile_id


def test_smart_routing_weighs_only_what_the_sender_may_write_in(
    tenant: dict[str, Any], gateway_url: str, ray_cluster: Cluster, embedder_app: str
) -> None:
    api, agent = tenant["api"], tenant["agent"]
    private = conversation_about(
        api, agent.id, "secret", "The vault combination is kept in the ledger database."
    )
    body = {"content": "Where is the vault combination kept?", "to": {"auto": True}}
    # A user of the same client who is a member of nothing: no candidate at all.
    as_eve = api.post("/v1/messages", json=body, headers={"X-Wonder-User": "eve"})
    assert as_eve.status_code == 409 and private not in as_eve.text
    assert "no candidate" in as_eve.json()["error"]["message"]
    # Another client: never another client's conversations.
    _, key = make_client(ray_cluster.store, "stranger")
    with http_client(gateway_url, key) as other:
        refused = other.post("/v1/messages", json=body)
    assert refused.status_code == 409 and private not in refused.text
    # The client itself does route there.
    mine = api.post("/v1/messages", json=body)
    assert mine.status_code == 202 and mine.json()["conversation_id"] == private
