"""Consolidation of one agent, in-process on a real LanceDB directory and local object store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.memory import (
    HashingEmbedder,
    LocalObjectStore,
    MemoryFilter,
    MemoryOps,
    MemoryService,
    MemoryTable,
    NewMemory,
    SearchRequest,
)
from core.memory.planning import plan_groups
from jobs.consolidate import ConsolidateOptions, consolidate_agent, extractive

DIM = 64
START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = START + timedelta(days=10)
OPTIONS = ConsolidateOptions(min_age=timedelta(days=1), group_size=4)


@pytest.fixture
def service(tmp_path: Path) -> MemoryService:
    ops = MemoryOps(MemoryTable(str(tmp_path / "lance"), DIM), LocalObjectStore(tmp_path / "obj"))
    ticks = iter(range(10_000))
    return MemoryService(
        ops, HashingEmbedder(DIM), clock=lambda: START + timedelta(hours=next(ticks))
    )


def seed(service: MemoryService, n: int) -> list[str]:
    episodes = [
        NewMemory(type="episode", content=f"Episode {i} about gardening.") for i in range(n)
    ]
    return [o.memory.id for o in asyncio.run(service.write("a", episodes))]


def consolidate(service: MemoryService):  # type: ignore[no-untyped-def]
    return asyncio.run(
        consolidate_agent(service.ops, service.embedder, extractive(2000), "a", OPTIONS, NOW)
    )


def test_episodes_fold_into_summaries_and_their_content_is_archived(
    service: MemoryService, tmp_path: Path
) -> None:
    ids = seed(service, 9)
    report = consolidate(service)
    assert (report.summaries, report.episodes_folded) == (2, 8)  # the ninth waits for company
    for episode_id in ids[:8]:
        row = service.ops.get("a", episode_id)
        assert row.content == "" and row.content_ref == f"a/{episode_id}"
        assert (tmp_path / "obj" / "a" / episode_id).read_text().startswith("Episode ")
        assert asyncio.run(service.read("a", episode_id)).content.startswith("Episode ")
    visible = asyncio.run(service.search("a", SearchRequest("gardening episode", k=10)))
    assert {h.memory.type for h in visible} == {"summary", "episode"}
    assert {h.memory.id for h in visible if h.memory.type == "episode"} == {ids[8]}
    every = SearchRequest("gardening episode", k=20, include_consolidated=True)
    assert len(asyncio.run(service.search("a", every))) == 11
    assert consolidate(service).summaries == 0  # idempotent


def test_an_interrupted_run_is_finished_not_duplicated(service: MemoryService) -> None:
    seed(service, 4)
    episodes = service.ops.list_all(MemoryFilter("a", types=("episode",)))
    (group,) = plan_groups(episodes, NOW, OPTIONS.min_age, OPTIONS.group_size)
    # A previous run wrote the summary and died before marking the episodes.
    from jobs.consolidate import fold_group

    real_mark = service.ops.mark_consolidated
    service.ops.mark_consolidated = lambda *a, **k: 0  # type: ignore[method-assign]
    asyncio.run(
        fold_group(
            service.ops, service.embedder, extractive(500), group.summary_id, group.episodes, NOW
        )
    )
    service.ops.mark_consolidated = real_mark  # type: ignore[method-assign]
    report = consolidate(service)
    assert (report.repaired, report.summaries) == (4, 0)
    assert service.ops.count(MemoryFilter("a", types=("summary",))) == 1
    assert service.ops.count(MemoryFilter("a", types=("episode",))) == 0
