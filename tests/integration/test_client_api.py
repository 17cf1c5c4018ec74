"""The client API's finding aids over HTTP (the gateway on the session's Ray, real turns run by
conversation actors with a scripted model): message search by text and by meaning (the real
embedder), turn filters and cursor pages, roots by default and ``mode=latest-fork``, a
conversation's counts and token totals, and the context channel shared with its tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.conversations import create_conversation
from core.ids import new_id, utc_now
from core.workflows import RunContext, WorkflowRun
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile, task_tool
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(420)

SCRIPT = [
    {"match": "use the lookup", "tool_calls": [{"name": "lookup", "arguments": {}}]},
    {"match": "read the plan", "tool_calls": [{"name": "read_plan", "arguments": {}}]},
    {"match": "break now", "fail": "the model is down"},
    {"match": "", "reply": "noted: {{last_user}}"},
]
SAID = [
    "We picked PostgreSQL for the ledger service.",
    "Lunch is pizza on Friday.",
    "please use the lookup tool",
    "The deploy uses a blue-green rollout.",
    "break now",
]


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture(scope="module")
def world(gateway_url: str, ray_cluster: Cluster) -> Iterator[dict[str, Any]]:
    """One client, an agent with two tools, and a conversation with five turns (one calls a tool,
    the last fails)."""
    store = ray_cluster.store
    client_id, key = make_client(store, "finder")
    lookup = task_tool(
        store, "lookup", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    read_plan = task_tool(store, "read_plan", [{"kind": "context.get", "params": {"key": "plan"}}])
    agent = make_agent(store, client_id, scripted_profile(store, SCRIPT), [lookup, read_plan])
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent.id}).json()["id"]
        turns = [say(api, conv, text) for text in SAID]
        yield {"api": api, "conv": conv, "turns": turns, "client_id": client_id, "agent": agent}


def say(api: httpx.Client, conv: str, content: str) -> str:
    ack = api.post(f"/v1/conversations/{conv}/messages", json={"content": content})
    assert ack.status_code == 202, ack.text
    turn_id = str(ack.json()["turn_id"])

    def ended() -> bool:
        turn = api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json()
        return turn["status"] != "active"

    wait_for(ended, timeout=90, interval=0.2)
    return turn_id


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.request.url, response.text)
    return response.json()


def test_text_search_finds_every_term_newest_first(world: dict[str, Any]) -> None:
    api, conv = world["api"], world["conv"]
    base = f"/v1/conversations/{conv}/messages/search"
    found = ok(api.get(base, params={"q": "postgresql LEDGER"}))
    assert found["mode"] == "text" and found["older_before_seq"] is None
    contents = [hit["message"]["content"] for hit in found["items"]]
    # The user's message and the agent's echo of it, newest first.
    assert contents == [f"noted: {SAID[0]}", SAID[0]]
    assert all(hit["score"] == 2 for hit in found["items"])
    assert ok(api.get(base, params={"q": "postgresql pizza"}))["items"] == []
    first = ok(api.get(base, params={"q": "noted", "limit": 2}))
    assert len(first["items"]) == 2 and first["older_before_seq"] is not None
    rest = ok(api.get(base, params={"q": "noted", "before_seq": first["older_before_seq"]}))
    seqs = [h["message"]["seq"] for h in first["items"] + rest["items"]]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs) >= 3
    for bad in ({"q": " "}, {"q": " ".join(f"t{i}" for i in range(17))}):
        assert api.get(base, params=bad).status_code == 400


def test_semantic_search_ranks_by_meaning(world: dict[str, Any], embedder_app: str) -> None:
    api, conv = world["api"], world["conv"]
    base = f"/v1/conversations/{conv}/messages/search"
    params = {"q": "which database did we choose?", "mode": "semantic", "limit": 3}
    found = ok(api.get(base, params=params))
    assert found["mode"] == "semantic" and found["scanned"] >= len(SAID)
    assert "PostgreSQL" in found["items"][0]["message"]["content"]
    scores = [hit["score"] for hit in found["items"]]
    assert scores == sorted(scores, reverse=True)
    again = ok(api.get(base, params=params))  # the vectors are kept: the same answer
    assert [h["message"]["id"] for h in again["items"]] == [
        h["message"]["id"] for h in found["items"]
    ]


def test_turn_filters_and_cursor_pages(world: dict[str, Any], ray_cluster: Cluster) -> None:
    api, conv, turns = world["api"], world["conv"], world["turns"]
    base = f"/v1/conversations/{conv}/turns"
    assert [t["id"] for t in ok(api.get(base, params={"tool": "lookup"}))["items"]] == [turns[2]]
    assert ok(api.get(base, params={"tool": "nothing"}))["items"] == []
    failed = ok(api.get(base, params={"failed": "true"}))["items"]
    assert [t["id"] for t in failed] == [turns[4]] and failed[0]["status"] == "failed"
    fine = ok(api.get(base, params={"failed": "false", "status": "completed"}))["items"]
    assert [t["id"] for t in fine] == turns[:4]
    # A workflow run started by a turn (as a workflow tool call records it).
    run_id = new_id("run")
    ray_cluster.store.workflow_runs.insert(
        WorkflowRun(
            id=run_id,
            workflow_id="echo",
            workflow_version=1,
            client_id=world["client_id"],
            context=RunContext(conversation_id=conv, turn_id=turns[1]),
            created_at=utc_now(),
        )
    )
    by_run = ok(api.get(base, params={"workflow_run": run_id}))["items"]
    assert [t["id"] for t in by_run] == [turns[1]]
    assert ok(api.get(base, params={"workflow_run": "run_nothing"}))["items"] == []
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"after_cursor": cursor} if cursor else {})}
        page = ok(api.get(base, params=params))
        pages.append([t["id"] for t in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [turns[0:2], turns[2:4], turns[4:5]]
    forged = api.get(base, params={"after_cursor": "zzz." + "A" * 22})
    assert forged.status_code == 404


def test_counts_and_token_totals(world: dict[str, Any]) -> None:
    api, conv = world["api"], world["conv"]
    stats = ok(api.get(f"/v1/conversations/{conv}/stats"))
    listed = ok(api.get(f"/v1/conversations/{conv}/messages", params={"limit": 1000}))["items"]
    turns = ok(api.get(f"/v1/conversations/{conv}/turns"))["items"]
    assert stats["messages"] == len(listed) and stats["turns"] == len(SAID)
    assert stats["turns_by_status"] == {"completed": 4, "failed": 1}
    prompt = sum(t["usage"]["prompt_tokens"] for t in turns)
    completion = sum(t["usage"]["completion_tokens"] for t in turns)
    assert (stats["prompt_tokens"], stats["completion_tokens"]) == (prompt, completion)
    assert stats["total_tokens"] == prompt + completion > 0
    forked = ok(
        api.post(f"/v1/conversations/{conv}/forks", json={"turn_id": world["turns"][1]}), 201
    )
    fork_stats = ok(api.get(f"/v1/conversations/{forked['id']}/stats"))
    assert fork_stats["inherited_turns"] == fork_stats["turns"] == 2
    assert fork_stats["inherited_messages"] == fork_stats["messages"] == 4


def test_roots_by_default_and_the_latest_fork_of_each_tree(
    gateway_url: str, ray_cluster: Cluster
) -> None:
    store = ray_cluster.store
    client_id, key = make_client(store, "trees")
    agent = make_agent(store, client_id, scripted_profile(store))
    with http_client(gateway_url, key) as api:
        first = ok(api.post("/v1/conversations", json={"agent_id": agent.id}), 201)["id"]
        turn = say(api, first, "hello")
        other = ok(api.post("/v1/conversations", json={"agent_id": agent.id}), 201)["id"]
        child = create_conversation(
            store, client_id=client_id, agent_id=agent.id, started_by_conversation_id=first
        )
        fork_a = ok(api.post(f"/v1/conversations/{first}/forks", json={"turn_id": turn}), 201)
        fork_b = ok(
            api.post(f"/v1/conversations/{fork_a['id']}/forks", json={"turn_id": turn}), 201
        )

        def listed(**params: Any) -> list[str]:
            return [c["id"] for c in ok(api.get("/v1/conversations", params=params))["items"]]

        assert listed() == [first, other, fork_a["id"], fork_b["id"]]  # roots: no child
        assert listed(ancestry="children") == [child.id]
        assert listed(ancestry="all") == [first, other, child.id, fork_a["id"], fork_b["id"]]
        assert listed(mode="latest-fork") == [other, fork_b["id"]]
        assert listed(mode="latest-fork", limit=1) == [other]
        page = ok(api.get("/v1/conversations", params={"mode": "latest-fork", "limit": 1}))
        rest = ok(
            api.get(
                "/v1/conversations",
                params={"mode": "latest-fork", "after_cursor": page["next_cursor"]},
            )
        )
        assert [c["id"] for c in rest["items"]] == [fork_b["id"]] and rest["next_cursor"] is None
        assert api.get("/v1/conversations", params={"mode": "newest"}).status_code == 422


def test_the_context_channel_is_the_one_its_tasks_read(world: dict[str, Any]) -> None:
    api = world["api"]
    conv = ok(api.post("/v1/conversations", json={"agent_id": world["agent"].id}), 201)["id"]
    base = f"/v1/conversations/{conv}/context"
    plan = {"steps": ["draft", "review"], "owner": "ada"}
    assert ok(api.put(f"{base}/plan", json={"value": plan})) == {"key": "plan", "value": plan}
    assert ok(api.get(f"{base}/plan"))["value"] == plan
    assert ok(api.get(base))["entries"] == {"plan": plan}
    turn = say(api, conv, "please read the plan")
    detail = ok(api.get(f"/v1/conversations/{conv}/turns/{turn}"))
    [move] = [m for m in detail["moves"] if m["tool_call"]]
    assert move["tool_result"]["result"] == {"key": "plan", "value": plan}
    big = api.put(f"{base}/big", json={"value": "x" * 40_000})
    assert big.status_code == 400 and "at most 32768" in big.text
    assert api.put(f"{base}/big", json={"value": "x" * 70_000}).status_code == 413
    assert api.put(f"{base}/bad%20key", json={"value": 1}).status_code == 422
    assert api.put(f"{base}/plan", json={"nope": 1}).status_code == 422
    # Members read; only a writer writes (a reader is refused, not told it is missing).
    owner, reader = {"X-Wonder-User": "ann"}, {"X-Wonder-User": "rob"}
    own = ok(
        api.post("/v1/conversations", json={"agent_id": world["agent"].id}, headers=owner), 201
    )
    own_base = f"/v1/conversations/{own['id']}"
    grant = api.put(f"{own_base}/members/rob", json={"level": "reader"}, headers=owner)
    assert grant.status_code == 200, grant.text
    ok(api.put(f"{own_base}/context/k", json={"value": 1}, headers=owner))
    assert ok(api.get(f"{own_base}/context/k", headers=reader))["value"] == 1
    assert api.put(f"{own_base}/context/k", json={"value": 2}, headers=reader).status_code == 403
    assert api.get(f"{own_base}/context/k", headers={"X-Wonder-User": "eve"}).status_code == 404
    assert ok(api.delete(f"{base}/plan")) == {"deleted": ["plan"]}
    assert api.get(f"{base}/plan").status_code == 404
    assert ok(api.get(base))["entries"] == {}
