"""The Embedder Serve deployment: same vectors as in-process, batching concurrent callers, and
memory actions in executor tasks (Ray workers) embedding through its handle."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray

from cluster.executor import execute_task
from cluster.executor_wiring import executor_services
from cluster.memory_access import ServedEmbedders
from core.domain import TaskDef
from core.memory import HashingEmbedder, MemoryFilter, NewMemory, open_memory_service
from core.memory.embedding import SentenceTransformerEmbedder
from core.ports import TaskContext
from jobs.embed import EmbedOptions, run_embed
from serving.embedder import ServeEmbedder, get_embedder, reset_embedder_cache
from tests.conftest import Cluster
from tests.factories import make_agent, make_client, scripted_profile


@dataclass(frozen=True)
class Locations:
    resolved_lance_uri: str
    resolved_object_uri: str
    s3_endpoint_url: str | None = None


def _close(a: list[float], b: list[float]) -> bool:
    return all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(a, b, strict=True))


async def test_deployment_matches_in_process_model_and_batches(embedder_app: str) -> None:
    remote = await ServeEmbedder.connect(embedder_app)
    assert (remote.model_name, remote.dim) == ("all-MiniLM-L6-v2", 384)
    texts = [f"sentence number {i} about memory" for i in range(24)]
    before = await remote.handle.info.remote()
    answers = await asyncio.gather(*(remote.embed([t]) for t in texts))
    after = await remote.handle.info.remote()
    served = after["requests"] - before["requests"]
    assert served == len(texts)
    assert after["batches"] - before["batches"] < served  # concurrent calls shared forward passes
    local = SentenceTransformerEmbedder().embed_sync(texts[:3])
    for answer, expected in zip(answers[:3], local, strict=False):
        assert _close(answer[0], expected)
    assert await remote.embed([]) == []
    # Earlier tests in this process may have cached the in-process fallback (re-checked only
    # every RECHECK_S); with the deployment up, a fresh look must find it.
    reset_embedder_cache()
    assert isinstance(await get_embedder(), ServeEmbedder)


def test_executor_tasks_use_the_deployment(embedder_app: str, ray_cluster: Cluster) -> None:
    from ray import serve

    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store)).id
    ctx = TaskContext(
        agent_id=agent,
        conversation_id="c",
        turn_id="t",
        settings_env={**ray_cluster.env, "WONDER_EMBEDDER": "serve"},
    )
    write = TaskDef(
        id="w",
        actions=[
            {
                "kind": "memory.write",
                "params": {
                    "memories": [
                        {"type": "fact", "content": "The office is in Lyon", "subject": "office"},
                        {"type": "note", "content": "Buy a new kettle"},
                    ]
                },
            }
        ],
    )
    search = TaskDef(
        id="s", actions=[{"kind": "memory.search", "params": {"query": "{{input.q}}", "k": 1}}]
    )
    handle = serve.get_app_handle(embedder_app)
    before = handle.info.remote().result()["requests"]
    written = ray.get(
        execute_task.remote(write.model_dump_json(), {}, ctx, executor_services), timeout=120
    )
    assert written.success and written.result["created"] == 2
    found = ray.get(
        execute_task.remote(
            search.model_dump_json(), {"q": "where is the office"}, ctx, executor_services
        ),
        timeout=120,
    )
    assert found.result["memories"][0]["content"] == "The office is in Lyon"
    assert handle.info.remote().result()["requests"] > before


def test_a_small_embed_job_embeds_through_the_warm_deployment(
    embedder_app: str, ray_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray import serve

    where = Locations(str(tmp_path / "lance"), str(tmp_path / "objects"))
    stand_in = open_memory_service(where, HashingEmbedder(384, name="stand-in"))
    texts = [f"decision {i}: ship on day {i}" for i in range(12)]
    asyncio.run(stand_in.write("agent-w", [NewMemory(content=t) for t in texts], dedupe="none"))
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    handle = serve.get_app_handle(embedder_app)
    before = handle.info.remote().result()["requests"]
    reset_embedder_cache()
    result = run_embed(EmbedOptions(write_chunk=5), ServedEmbedders(ray_cluster.env))
    assert result["mode"] == "in_process" and result["written"] == len(texts)
    assert handle.info.remote().result()["requests"] - before == 3  # 12 rows in batches of 5

    stored = stand_in.ops.list_all(MemoryFilter("agent-w"))
    vectors = stand_in.ops.vectors("agent-w", [m.id for m in stored])
    local = dict(zip(texts, SentenceTransformerEmbedder().embed_sync(texts), strict=True))
    for memory in stored:
        assert _close(vectors[memory.id], local[memory.content])
    assert {m.embedding_model for m in stored} == {"all-MiniLM-L6-v2"}
