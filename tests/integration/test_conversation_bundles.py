"""Conversation export and import over the real gateway (docs/observability.md).

A conversation with real turns (a scripted model on the session's Ray) is exported as one bundle
and imported into another client: the history is the same, every id is new, and the imported
conversation's next turn sends its model the imported history. The boundary is attacked: another
client's conversation, another client's agent, a bundle too large or malformed, ids that collide
with stored ones. An inconsistent bundle's refusals (rows twice, orphans, a running turn, another
conversation's rows) are tested in tests/unit/test_conversation_bundle_routes.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest

from core.conversation_bundle import MAX_MESSAGES
from serving.gateway.limits import MIB
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.test_gateway import deploy_gateway, error_of, http_client

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


class Side:
    """A client of the gateway with its own agent (a scripted model that echoes)."""

    def __init__(self, url: str, cluster: Cluster, name: str) -> None:
        store = cluster.store
        self.client_id, key = make_client(store, name)
        self.agent = make_agent(store, self.client_id, scripted_profile(store))
        self.api = http_client(url, key)

    def converse(self, *contents: str) -> str:
        """A new conversation with this side's agent, each message answered in turn."""
        conversation = self.api.post("/v1/conversations", json={"agent_id": self.agent.id})
        conversation_id = str(conversation.json()["id"])
        for content in contents:
            self.say(conversation_id, content)
        return conversation_id

    def say(self, conversation_id: str, content: str) -> str:
        """Post a message and wait for its turn to complete; the turn's id."""
        ack = self.api.post(
            f"/v1/conversations/{conversation_id}/messages", json={"content": content}
        )
        assert ack.status_code in (200, 201, 202), ack.text
        turn_id = str(ack.json()["turn_id"])
        path = f"/v1/conversations/{conversation_id}/turns/{turn_id}"
        wait_for(lambda: self.api.get(path).json()["status"] == "completed", timeout=90)
        return turn_id

    def history(self, conversation_id: str) -> list[tuple[str, str]]:
        messages = self.api.get(f"/v1/conversations/{conversation_id}/messages").json()["items"]
        return [(m["role"], m["content"]) for m in messages]


@pytest.fixture
def alice(gateway_url: str, ray_cluster: Cluster) -> Iterator[Side]:
    side = Side(gateway_url, ray_cluster, "alice")
    yield side
    side.api.close()


@pytest.fixture
def bob(gateway_url: str, ray_cluster: Cluster) -> Iterator[Side]:
    side = Side(gateway_url, ray_cluster, "bob")
    yield side
    side.api.close()


def test_an_exported_conversation_imported_elsewhere_has_the_same_history(
    alice: Side, bob: Side, ray_cluster: Cluster
) -> None:
    source = alice.converse("the code word is heron", "and the colour is teal")
    # A turn's model calls are recorded beside it, a moment after it ends: wait for both.
    for turn in alice.api.get(f"/v1/conversations/{source}/turns").json()["items"]:
        calls = f"/v1/conversations/{source}/turns/{turn['id']}/calls"
        wait_for(lambda calls=calls: alice.api.get(calls).json()["items"], timeout=30)
    exported = alice.api.get(f"/v1/conversations/{source}/export")
    assert exported.status_code == 200, exported.text
    bundle = exported.json()
    assert bundle["format"] == "wonder.conversation/1"
    assert [t["status"] for t in bundle["turns"]] == ["completed", "completed"]
    assert {c["source"]["turn_id"] for c in bundle["model_calls"]} == {
        t["id"] for t in bundle["turns"]
    }
    assert all(c["request"]["messages"] for c in bundle["model_calls"])  # bodies inline

    imported = bob.api.post(
        "/v1/conversation-imports", json={"bundle": bundle, "agent_id": bob.agent.id}
    )
    assert imported.status_code == 201, imported.text
    answer = imported.json()
    conversation = answer["conversation"]
    new_id = conversation["id"]
    assert new_id != source and conversation["client_id"] == bob.client_id
    assert conversation["agent_id"] == bob.agent.id
    assert set(answer["turn_ids"]) == {t["id"] for t in bundle["turns"]}
    assert not set(answer["turn_ids"].values()) & set(answer["turn_ids"])  # every id new
    assert answer["model_calls"] == len(bundle["model_calls"])
    assert bob.history(new_id) == alice.history(source)
    turns = bob.api.get(f"/v1/conversations/{new_id}/turns").json()["items"]
    assert [t["id"] for t in turns] == [answer["turn_ids"][t["id"]] for t in bundle["turns"]]
    events = bob.api.get(f"/v1/conversations/{new_id}/events").json()["items"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    calls = bob.api.get(f"/v1/conversations/{new_id}/turns/{turns[0]['id']}/calls").json()
    assert calls["items"][0]["request"] == bundle["model_calls"][0]["request"]

    # The imported conversation goes on: its next turn's model sees the imported history.
    turn_id = bob.say(new_id, "what was the code word?")
    path = f"/v1/conversations/{new_id}/turns/{turn_id}/calls"
    sent = wait_for(lambda: bob.api.get(path).json()["items"], timeout=30)
    contents = [m.get("content") for m in sent[0]["request"]["messages"]]
    assert "the code word is heron" in contents and "and the colour is teal" in contents
    assert contents[-1] == "what was the code word?"
    # The exporting side's conversation is untouched, and not the importer's to read.
    assert len(alice.history(source)) == 4
    assert alice.api.get(f"/v1/conversations/{new_id}").status_code == 404
    assert bob.api.get(f"/v1/conversations/{source}/export").status_code == 404


def test_ids_that_collide_are_remapped_and_agents_of_another_client_dropped(
    alice: Side, bob: Side
) -> None:
    source = alice.converse("hello")
    bundle = alice.api.get(f"/v1/conversations/{source}/export").json()
    bob_own = bob.converse("mine")
    colliding = copy.deepcopy(bundle)
    colliding["conversation"]["id"] = bob_own  # ids of stored rows, of the importer's own
    for turn in colliding["turns"]:
        turn["conversation_id"] = bob_own
    for message in colliding["messages"]:
        message["conversation_id"] = bob_own
    for move in colliding["moves"]:
        move["turn_id"] = colliding["turns"][0]["id"]
    first = bob.api.post("/v1/conversation-imports", json={"bundle": colliding})
    again = bob.api.post("/v1/conversation-imports", json={"bundle": colliding})
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    ids = {first.json()["conversation"]["id"], again.json()["conversation"]["id"]}
    assert len(ids) == 2 and bob_own not in ids and source not in ids
    assert bob.history(bob_own)[0] == ("user", "mine")  # the stored conversation is untouched
    assert len(bob.history(bob_own)) == 2
    # Alice's agent is not Bob's: the import keeps the history, not the agent.
    imported = first.json()["conversation"]
    assert imported["agent_id"] is None
    assert all(p["id"] != alice.agent.id for p in imported["participants"])
    named = bob.api.post(
        "/v1/conversation-imports", json={"bundle": bundle, "agent_id": alice.agent.id}
    )
    assert named.status_code == 404 and "agent_id" in error_of(named)["message"]


def test_a_malformed_or_oversized_bundle_is_refused_before_anything_is_written(
    alice: Side,
) -> None:
    source = alice.converse("hi")
    bundle = alice.api.get(f"/v1/conversations/{source}/export").json()
    path = "/v1/conversation-imports"
    assert alice.api.post(path, json={"bundle": {**bundle, "format": "other/9"}}).status_code == 422
    assert alice.api.post(path, json={"bundle": {**bundle, "extra": 1}}).status_code == 422
    assert (
        alice.api.post(path, json={"bundle": {"format": "wonder.conversation/1"}}).status_code
        == 422
    )
    bad_json = alice.api.post(path, content=b"{nope", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400
    many = {**bundle, "messages": [bundle["messages"][0]] * (MAX_MESSAGES + 1)}
    too_many = alice.api.post(path, json={"bundle": many})
    assert too_many.status_code == 422, too_many.text[:300]
    huge = json.dumps({"bundle": bundle, "title": "x" * (33 * MIB)}).encode()
    too_large = alice.api.post(path, content=huge, headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413
    assert error_of(too_large)["code"] == "PAYLOAD_TOO_LARGE"
    listed = alice.api.get("/v1/conversations", params={"limit": 200}).json()["items"]
    assert [c["id"] for c in listed] == [source]
