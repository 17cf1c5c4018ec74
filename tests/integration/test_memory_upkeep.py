"""Memory upkeep on a schedule, over the real cluster: the gateway (HTTP) sets and runs an agent's
policy, the session's ``cron-scheduler`` actor starts each run as a Ray task, and the library
strategy (a task, or a workflow) writes the summaries into the session's LanceDB table."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from core.domain import TaskAction, TaskDef
from core.ids import new_id, utc_now
from core.memory import HashingEmbedder, MemoryFilter, open_memory_ops
from core.memory.operations import MemoryOps
from core.memory.records import Memory
from core.workflows import WorkflowDef
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(420)

SUMMARY = "Summary: the launch moved to May and Ada leads it."


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def tenant(gateway_url: str, ray_cluster: Cluster) -> Iterator[tuple[str, httpx.Client]]:
    client_id, key = make_client(ray_cluster.store, "upkeep")
    with http_client(gateway_url, key) as api:
        yield client_id, api


def _memories(cluster: Cluster) -> MemoryOps:
    return open_memory_ops(cluster.settings, 384)


def _old_episodes(ops: MemoryOps, agent_id: str, n: int, days_ago: float) -> list[str]:
    """``n`` episodes written ``days_ago`` (vectors from a stand-in embedder: upkeep only
    reads their contents)."""
    at = utc_now() - timedelta(days=days_ago)
    texts = [f"Episode {i}: we talked about the launch plan with Ada." for i in range(n)]
    vectors = HashingEmbedder(384, name="stand-in").embed_sync(texts)
    rows = [
        (
            Memory(
                id=new_id("mem"),
                agent_id=agent_id,
                type="episode",
                content=text,
                significance=0.3 + 0.1 * i,
                created_at=at + timedelta(minutes=i),
                updated_at=at + timedelta(minutes=i),
                embedding_model="stand-in",
            ),
            vector,
        )
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]
    ops.insert(rows)
    return [memory.id for memory, _ in rows]


def _summarise_task(cluster: Cluster, profile_id: str) -> TaskDef:
    """A library strategy: the model summarises the group's transcript."""
    action = {
        "kind": "llm",
        "params": {"model_profile": profile_id, "transcript": "{{input.transcript}}"},
    }
    task = TaskDef(id=f"summarise-{new_id().lower()}", actions=[TaskAction.model_validate(action)])
    return cluster.store.tasks.put(task, utc_now())


def _run_and_wait(api: httpx.Client, agent_id: str, runs: int) -> dict[str, Any]:
    started = api.post(f"/v1/agents/{agent_id}/memory-upkeep/run")
    assert started.status_code == 202, started.text

    def ended() -> dict[str, Any] | None:
        view = dict(api.get(f"/v1/agents/{agent_id}/memory-upkeep").json())
        last = view.get("last_run")
        done = view["runs"] >= runs and last is not None and last["ok"] is not None
        return view if done else None

    view = wait_for(ended, timeout=240, interval=0.5)
    assert view["last_run"]["ok"], view["last_run"]
    return view


def test_a_task_strategy_folds_old_episodes_and_retention_drops_their_rows(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client], embedder_app: str
) -> None:
    client_id, api = tenant
    profile = scripted_profile(ray_cluster.store, [{"reply": SUMMARY}, {"reply": SUMMARY}])
    task = _summarise_task(ray_cluster, profile.id)
    policy = {
        "schedule": "0 3 * * *",
        "consolidation": {"after_hours": 24, "group_size": 10, "strategy_task_id": task.id},
        "retention": {"archived_days": 0},
    }
    agent = make_agent(ray_cluster.store, client_id, profile, memory_upkeep=policy)
    view = api.get(f"/v1/agents/{agent.id}/memory-upkeep").json()
    assert view["source"] == "persona" and view["policy"]["schedule"] == "0 3 * * *"
    ops = _memories(ray_cluster)
    folded = _old_episodes(ops, agent.id, 5, days_ago=3)
    [recent] = _old_episodes(ops, agent.id, 1, days_ago=0)

    first = _run_and_wait(api, agent.id, runs=1)
    result = first["last_run"]["result"]
    assert result["strategy"] == f"task:{task.id}"
    assert (result["summaries"], result["episodes_folded"]) == (1, 5)
    assert result["archived_rows_dropped"] == 0  # folded just now: kept until the next run
    assert first["next_due"].endswith("03:00:00+00:00")  # back on its schedule
    [summary] = ops.list_all(MemoryFilter(agent.id, types=("summary",)))
    assert ops.content(summary) == SUMMARY
    assert summary.metadata["sources"] == folded
    rows = {m.id: m for m in ops.list_all(MemoryFilter(agent.id, include_consolidated=True))}
    assert all(rows[i].consolidated_into == summary.id for i in folded)
    assert rows[recent].consolidated_into is None  # younger than after_hours
    archived = rows[folded[0]].content_ref
    assert archived is not None

    second = _run_and_wait(api, agent.id, runs=2)
    assert second["last_run"]["result"]["archived_rows_dropped"] == 5
    rows = {m.id: m for m in ops.list_all(MemoryFilter(agent.id, include_consolidated=True))}
    assert set(rows) == {summary.id, recent}
    assert ops.objects.get(archived).decode().startswith("Episode 0:")  # the archive stays


def test_a_workflow_strategy_and_the_agents_own_policy(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client], embedder_app: str
) -> None:
    client_id, api = tenant
    profile = scripted_profile(ray_cluster.store, [{"reply": SUMMARY}])
    task = _summarise_task(ray_cluster, profile.id)
    workflow = WorkflowDef.model_validate(
        {
            "id": f"consolidate-{new_id().lower()}",
            "nodes": [
                {
                    "id": "summarise",
                    "kind": "task",
                    "target_id": task.id,
                    "input_mapping": {"transcript": "input.transcript"},
                }
            ],
        }
    )
    ray_cluster.store.workflows.put(workflow, utc_now())
    agent = make_agent(ray_cluster.store, client_id, profile)  # its persona has no upkeep
    refused = api.post(f"/v1/agents/{agent.id}/memory-upkeep/run")
    assert refused.status_code == 409 and "no memory upkeep policy" in refused.text
    bad = api.put(
        f"/v1/agents/{agent.id}/memory-upkeep",
        json={"consolidation": {"strategy_task_id": "a", "strategy_workflow": "b"}},
    )
    assert bad.status_code == 422 and "one consolidation strategy" in bad.text
    own = {
        "schedule": "30 4 * * *",
        "consolidation": {"after_hours": 1, "min_group": 2, "strategy_workflow": workflow.id},
    }
    put = api.put(f"/v1/agents/{agent.id}/memory-upkeep", json=own)
    assert put.status_code == 200, put.text
    assert put.json()["source"] == "agent" and put.json()["next_due"].endswith("04:30:00+00:00")
    ops = _memories(ray_cluster)
    folded = _old_episodes(ops, agent.id, 3, days_ago=1)

    view = _run_and_wait(api, agent.id, runs=1)
    assert view["last_run"]["result"]["strategy"] == f"workflow:{workflow.id}"
    [summary] = ops.list_all(MemoryFilter(agent.id, types=("summary",)))
    assert ops.content(summary) == SUMMARY and summary.metadata["sources"] == folded

    gone = api.delete(f"/v1/agents/{agent.id}/memory-upkeep")
    assert gone.json()["source"] is None and gone.json()["next_due"] is None
    other = api.get(f"/v1/agents/agent_{new_id()}/memory-upkeep")
    assert other.status_code == 404
