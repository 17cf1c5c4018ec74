"""``/v1/agents/{agent_id}/memories`` over real HTTP on the session's Serve (gateway + embedder)."""

from __future__ import annotations

import httpx

from tests.conftest import Cluster
from tests.integration.test_gateway import (  # the session's one gateway deployment
    PERSONA,
    alice,
    bob,
    error_of,
    gateway_url,
)

__all__ = ["alice", "bob", "gateway_url"]  # fixtures used below


def create_agent(client: httpx.Client) -> str:
    response = client.post(
        "/v1/agents", json={"name": "rememberer", "persona": {"id": "inline", **PERSONA}}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_memories_write_list_search_read_delete_over_http(
    alice: httpx.Client, bob: httpx.Client, embedder_app: str, ray_cluster: Cluster
) -> None:
    agent = create_agent(alice)
    base = f"/v1/agents/{agent}/memories"
    first = alice.post(
        base,
        json={
            "type": "fact",
            "subject": "user.team",
            "content": "The user works on the payments team",
            "significance": 0.8,
        },
    )
    assert first.status_code == 201, first.text
    assert first.json()["action"] == "created"
    fact_id = first.json()["memory"]["id"]
    moved = alice.post(
        base,
        json={
            "type": "fact",
            "subject": "user.team",
            "content": "The user moved to the search team",
        },
    )
    assert moved.json()["action"] == "updated" and moved.json()["memory"]["id"] == fact_id

    big = "Meeting notes. " + "We reviewed the roadmap item by item. " * 150
    large = alice.post(base, json={"type": "episode", "content": big})
    assert large.status_code == 201 and large.json()["memory"]["content"] == big
    large_id = large.json()["memory"]["id"]
    note = alice.post(base, json={"content": "Lunch on Friday with Sam", "significance": 0.1})
    assert note.status_code == 201

    page = alice.get(base, params={"limit": 2}).json()
    assert [m["id"] for m in page["items"]] == [note.json()["memory"]["id"], large_id]
    rest = alice.get(base, params={"limit": 2, "after_cursor": page["next_cursor"]}).json()
    assert [m["id"] for m in rest["items"]] == [fact_id] and rest["next_cursor"] is None
    assert [m["id"] for m in alice.get(base, params={"types": "fact"}).json()["items"]] == [fact_id]

    for mode in ("vector", "fts", "hybrid"):
        found = alice.post(
            f"{base}/search", json={"query": "which team is the user on", "k": 2, "mode": mode}
        )
        assert found.status_code == 200, found.text
        hits = found.json()["items"]
        assert hits[0]["id"] == fact_id, (mode, hits)
        assert hits[0]["content"] == "The user moved to the search team"
        assert 0 <= hits[0]["relevance"] <= 1 and hits[0]["score"] >= hits[-1]["score"]

    read = alice.get(f"{base}/{large_id}").json()
    assert read["content"] == big and read["content_ref"] == f"{agent}/{large_id}"

    # Another client sees nothing, and gets the one error shape.
    hidden = bob.get(base)
    assert hidden.status_code == 404 and error_of(hidden)["code"] == "NOT_FOUND"
    assert bob.post(f"{base}/search", json={"query": "team"}).status_code == 404
    bad = alice.post(f"{base}/search", json={"query": "team", "k": 0})
    assert bad.status_code == 422 and error_of(bad)["code"] == "INVALID_INPUT"
    missing = alice.get(f"{base}/mem_doesnotexist")
    assert missing.status_code == 404 and error_of(missing)["code"] == "NOT_FOUND"

    assert alice.delete(f"{base}/{large_id}").json() == {"deleted": [large_id]}
    assert alice.get(f"{base}/{large_id}").status_code == 404


def test_an_edited_memory_is_found_by_its_new_text_over_http(
    alice: httpx.Client, bob: httpx.Client, embedder_app: str, ray_cluster: Cluster
) -> None:
    agent = create_agent(alice)
    other_agent = create_agent(alice)
    base = f"/v1/agents/{agent}/memories"
    wrong = alice.post(base, json={"type": "fact", "content": "The office dog is called Rex"})
    memory_id = wrong.json()["memory"]["id"]
    alice.post(base, json={"content": "The quarterly report is due in March"})

    edited = alice.patch(
        f"{base}/{memory_id}",
        json={"content": "The office parrot is called Kiwi", "significance": 0.9, "subject": "pet"},
    )
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert (body["id"], body["content"], body["significance"], body["subject"]) == (
        memory_id,
        "The office parrot is called Kiwi",
        0.9,
        "pet",
    )
    assert body["metadata"]["history"][0]["content"] == "The office dog is called Rex"
    assert alice.get(f"{base}/{memory_id}").json()["content"] == "The office parrot is called Kiwi"
    for mode in ("vector", "fts", "hybrid"):
        found = alice.post(f"{base}/search", json={"query": "parrot named Kiwi", "mode": mode})
        hits = found.json()["items"]
        assert hits[0]["id"] == memory_id and hits[0]["content"].endswith("Kiwi"), (mode, hits)
    entries = alice.get("/v1/audit").json()["items"]
    (entry,) = [e for e in entries if e["target"] == f"memory:{memory_id}"]
    assert entry["action"] == "memory.edit"
    assert entry["details"]["fields"] == ["content", "significance", "subject"]

    # Refusals: another client's agent, another agent's memory, bad bodies; nothing changes.
    hidden = bob.patch(f"{base}/{memory_id}", json={"content": "mine now"})
    assert hidden.status_code == 404 and error_of(hidden)["code"] == "NOT_FOUND"
    elsewhere = alice.patch(
        f"/v1/agents/{other_agent}/memories/{memory_id}", json={"content": "moved"}
    )
    assert elsewhere.status_code == 404 and memory_id in error_of(elsewhere)["message"]
    for bad in ({}, {"content": ""}, {"significance": 2}, {"significance": True}, {"id": "x"}):
        refused = alice.patch(f"{base}/{memory_id}", json=bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert error_of(refused)["code"] == "INVALID_INPUT"
    not_json = alice.patch(f"{base}/{memory_id}", content=b"{", headers={"content-type": "x"})
    assert 400 <= not_json.status_code < 500
    missing = alice.patch(f"{base}/mem_doesnotexist", json={"significance": 0.1})
    assert missing.status_code == 404 and "mem_doesnotexist" in error_of(missing)["message"]
    assert alice.get(f"{base}/{memory_id}").json()["content"] == "The office parrot is called Kiwi"
