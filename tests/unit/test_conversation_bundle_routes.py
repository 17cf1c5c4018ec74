"""Conversation export and import through the gateway's routes (docs/observability.md).

Real Conversation actors and a real SQLite store in this process (``tests.inprocess``), a
scripted model that echoes; the routes are called through FastAPI's TestClient (the session-Ray
version over real HTTP is ``tests/integration/test_conversation_bundles.py``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.conversation_bundle import MAX_MESSAGES
from core.domain import Agent, TurnStatus
from core.recording_setup import flush_records
from serving.gateway.limits import MIB
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile
from tests.inprocess import InProcessCluster
from tests.recorded_gateway import gateway_client, recording_cluster

pytestmark = pytest.mark.timeout(120)
IMPORT = "/v1/conversation-imports"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with recording_cluster(tmp_path) as cluster:
        yield cluster


class Side:
    """A client with its own echoing agent, and the gateway as it sees it."""

    def __init__(self, cluster: InProcessCluster) -> None:
        self.cluster = cluster
        self.client_id, key = make_client(cluster.store)
        self.agent: Agent = make_agent(
            cluster.store, self.client_id, scripted_profile(cluster.store)
        )
        self.api = gateway_client(cluster, key)

    async def say(self, conversation_id: str, content: str) -> str:
        store = self.cluster.store
        ack = await self.cluster.post_message(conversation_id, content, "ana")

        def ended() -> bool:
            return store.turns.get(ack.turn_id).status is not TurnStatus.ACTIVE

        await async_wait_for(ended, timeout=30)
        assert store.turns.get(ack.turn_id).status is TurnStatus.COMPLETED
        flush_records()
        return ack.turn_id

    async def converse(self, *contents: str) -> str:
        conversation = make_conversation(self.cluster.store, self.client_id, self.agent).id
        for content in contents:
            await self.say(conversation, content)
        return conversation

    def history(self, conversation_id: str) -> list[tuple[str, str]]:
        messages = self.api.get(f"/v1/conversations/{conversation_id}/messages").json()["items"]
        return [(m["role"], m["content"]) for m in messages]

    def export(self, conversation_id: str) -> dict[str, Any]:
        exported = self.api.get(f"/v1/conversations/{conversation_id}/export")
        assert exported.status_code == 200, exported.text
        return dict(exported.json())


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "retriable"} <= set(body["error"])
    return dict(body["error"])


async def test_an_imported_conversation_has_the_history_and_its_model_sees_it(
    cluster: InProcessCluster,
) -> None:
    alice, bob = Side(cluster), Side(cluster)
    source = await alice.converse("the code word is heron", "and the colour is teal")
    bundle = alice.export(source)
    assert bundle["format"] == "wonder.conversation/1"
    assert [t["status"] for t in bundle["turns"]] == ["completed", "completed"]
    assert {c["source"]["turn_id"] for c in bundle["model_calls"]} == {
        t["id"] for t in bundle["turns"]
    }
    assert all(c["request"]["messages"] for c in bundle["model_calls"])

    imported = bob.api.post(IMPORT, json={"bundle": bundle, "agent_id": bob.agent.id})
    assert imported.status_code == 201, imported.text
    answer = imported.json()
    new_id = answer["conversation"]["id"]
    assert new_id != source and answer["conversation"]["client_id"] == bob.client_id
    assert answer["conversation"]["agent_id"] == bob.agent.id
    assert set(answer["turn_ids"]) == {t["id"] for t in bundle["turns"]}
    assert not set(answer["turn_ids"].values()) & set(answer["turn_ids"])
    assert bob.history(new_id) == alice.history(source)
    turns = bob.api.get(f"/v1/conversations/{new_id}/turns").json()["items"]
    assert [t["id"] for t in turns] == [answer["turn_ids"][t["id"]] for t in bundle["turns"]]
    events = bob.api.get(f"/v1/conversations/{new_id}/events").json()["items"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    first_calls = bob.api.get(f"/v1/conversations/{new_id}/turns/{turns[0]['id']}/calls").json()
    assert first_calls["items"][0]["request"] == bundle["model_calls"][0]["request"]
    # Exported again, the import is the same history (a round trip keeps it).
    again = bob.export(new_id)
    assert [m["content"] for m in again["messages"]] == [m["content"] for m in bundle["messages"]]

    # The imported conversation goes on, with a fresh actor as its log's writer: its next
    # turn's model is sent the imported history.
    turn_id = await bob.say(new_id, "what was the code word?")
    sent = bob.api.get(f"/v1/conversations/{new_id}/turns/{turn_id}/calls").json()["items"]
    contents = [m.get("content") for m in sent[0]["request"]["messages"]]
    assert "the code word is heron" in contents and "and the colour is teal" in contents
    assert contents[-1] == "what was the code word?"
    assert len(alice.history(source)) == 4  # the exporting side's conversation is untouched
    assert alice.api.get(f"/v1/conversations/{new_id}").status_code == 404
    refused = bob.api.get(f"/v1/conversations/{source}/export")
    assert refused.status_code == 404 and error_of(refused)["code"] == "NOT_FOUND"


async def test_colliding_ids_are_remapped_and_another_clients_agent_is_dropped(
    cluster: InProcessCluster,
) -> None:
    alice, bob = Side(cluster), Side(cluster)
    source = await alice.converse("hello")
    bundle = alice.export(source)
    bob_own = await bob.converse("mine")
    bob_turn = bob.api.get(f"/v1/conversations/{bob_own}/turns").json()["items"][0]["id"]
    colliding = copy.deepcopy(bundle)  # ids of stored rows: the importer's own conversation
    colliding["conversation"]["id"] = bob_own
    for turn in colliding["turns"]:
        turn["id"], turn["conversation_id"] = bob_turn, bob_own
    for message in colliding["messages"]:
        message["conversation_id"], message["turn_id"] = bob_own, bob_turn
    for move in colliding["moves"]:
        move["turn_id"] = bob_turn
    for call in colliding["model_calls"]:
        call["source"]["turn_id"] = bob_turn
    first = bob.api.post(IMPORT, json={"bundle": colliding})
    again = bob.api.post(IMPORT, json={"bundle": colliding})
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    ids = {first.json()["conversation"]["id"], again.json()["conversation"]["id"]}
    assert len(ids) == 2 and not ids & {bob_own, source}
    assert first.json()["turn_ids"][bob_turn] != bob_turn
    assert bob.history(bob_own) == [("user", "mine"), ("agent", bob.history(bob_own)[1][1])]
    assert [t["id"] for t in bob.api.get(f"/v1/conversations/{bob_own}/turns").json()["items"]] == [
        bob_turn
    ]
    imported = first.json()["conversation"]  # Alice's agent is not Bob's: history only
    assert imported["agent_id"] is None
    assert all(p["id"] != alice.agent.id for p in imported["participants"])
    named = bob.api.post(IMPORT, json={"bundle": bundle, "agent_id": alice.agent.id})
    assert named.status_code == 404 and "agent_id" in error_of(named)["message"]


def _broken(bundle: dict[str, Any], how: str) -> dict[str, Any]:
    broken = copy.deepcopy(bundle)
    if how == "twice":
        broken["messages"].append(broken["messages"][0])
    elif how == "orphan":
        broken["moves"].append(
            {
                "id": "move_x",
                "turn_id": "turn_elsewhere",
                "sequence": 1,
                "created_at": "2026-01-01T00:00:00Z",
            }
        )
    elif how == "running":
        broken["turns"][0]["status"] = "active"
    else:
        broken["messages"][0]["conversation_id"] = "conv_other"
    return broken


async def test_a_bad_bundle_is_refused_with_a_4xx_and_writes_nothing(
    cluster: InProcessCluster,
) -> None:
    alice = Side(cluster)
    source = await alice.converse("hi")
    bundle = alice.export(source)
    for how, fragment in (
        ("twice", "appears twice"),
        ("orphan", "names a turn the bundle does not hold"),
        ("running", "still running"),
        ("foreign", "another conversation"),
    ):
        refused = alice.api.post(IMPORT, json={"bundle": _broken(bundle, how)})
        assert refused.status_code == 400, (how, refused.text)
        assert fragment in error_of(refused)["message"], how
    for body in (
        {"bundle": {**bundle, "format": "other/9"}},
        {"bundle": {**bundle, "extra": 1}},
        {"bundle": {"format": "wonder.conversation/1"}},
        {"bundle": bundle, "unknown": True},
        {"bundle": {**bundle, "messages": [bundle["messages"][0]] * (MAX_MESSAGES + 1)}},
    ):
        refused = alice.api.post(IMPORT, json=body)
        assert refused.status_code == 422, refused.text[:300]
        assert error_of(refused)["code"] == "INVALID_INPUT"
    malformed = alice.api.post(
        IMPORT, content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400
    huge = json.dumps({"bundle": bundle, "title": "x" * (33 * MIB)}).encode()
    too_large = alice.api.post(IMPORT, content=huge, headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413 and error_of(too_large)["code"] == "PAYLOAD_TOO_LARGE"
    listed = alice.api.get("/v1/conversations", params={"limit": 200}).json()["items"]
    assert [c["id"] for c in listed] == [source]
