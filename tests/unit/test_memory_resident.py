"""Resident vectors: the pure part (top-k, filter masks, changes by fragment) on arrays, and
freshness for real: one LanceDB connection writes, updates, deletes, consolidates, re-embeds and
compacts while another searches from its resident cache and must see every commit (no Ray)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from core.memory import (
    HashingEmbedder,
    MemoryOps,
    MemoryService,
    MemoryTable,
    open_object_store,
)
from core.memory.filters import MemoryFilter
from core.memory.lance import memory_schema
from core.memory.records import NewMemory
from core.memory.resident import (
    ADDRESS_COLUMN,
    AgentVectors,
    fragment_changes,
    top_by_similarity,
    unit_rows,
)
from core.memory.service import SearchRequest
from core.memory.tuning import VectorTuning

DIM = 8
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DELETED, DELETED_AGAIN = "_deletions/0-3-1.arrow", "_deletions/0-4-2.arrow"


def rows(
    ids: Sequence[str],
    vectors: np.ndarray,
    addresses: Sequence[int],
    *,
    types: Sequence[str] | None = None,
    consolidated: Sequence[bool] | None = None,
    subjects: Sequence[str | None] | None = None,
    minutes: Sequence[int] | None = None,
) -> pa.Table:
    n = len(ids)
    created = [T0 + timedelta(minutes=m) for m in (minutes or range(n))]
    table = pa.table(
        {
            "id": list(ids),
            "agent_id": ["a"] * n,
            "type": list(types or ["note"] * n),
            "content": [f"content of {i}" for i in ids],
            "content_ref": pa.nulls(n, pa.string()),
            "significance": pa.array(np.linspace(0, 1, n), pa.float32()),
            "metadata": ["{}"] * n,
            "subject": list(subjects or [None] * n),
            "embedding_model": ["m"] * n,
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(vectors.astype(np.float32).reshape(-1)), DIM
            ),
            "created_at": created,
            "updated_at": created,
            "consolidated_into": ["mem_s" if c else None for c in (consolidated or [False] * n)],
        },
        schema=memory_schema(DIM),
    )
    return table.append_column(ADDRESS_COLUMN, pa.array(addresses, pa.uint64()))


def address(fragment: int, offset: int) -> int:
    return fragment << 32 | offset


def random_vectors(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


# ---------------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("before", "after", "added", "removed", "changed"),
    [
        ({0: None}, {0: None}, set(), set(), set()),
        ({0: None}, {0: None, 1: None}, {1}, set(), set()),  # an append
        ({0: None}, {0: DELETED, 2: None}, {2}, set(), {0}),  # an update: delete + new rows
        ({0: DELETED}, {0: DELETED_AGAIN}, set(), set(), {0}),  # a delete
        ({0: DELETED, 1: None}, {5: None}, {5}, {0, 1}, set()),  # a compaction
    ],
)
def test_fragment_changes(
    before: dict[int, str | None],
    after: dict[int, str | None],
    added: set[int],
    removed: set[int],
    changed: set[int],
) -> None:
    changes = fragment_changes(before, after)
    assert changes.added == added and changes.removed == removed and changes.changed == changed
    assert changes.empty == (not (added or removed or changed))


def test_top_by_similarity_is_exact_and_respects_the_mask() -> None:
    rng = np.random.default_rng(3)
    similarities = rng.standard_normal(1000).astype(np.float32)
    mask = rng.random(1000) < 0.3
    expected = [i for i in np.argsort(-similarities) if mask[i]][:40]
    assert top_by_similarity(similarities, mask, 40).tolist() == expected
    assert top_by_similarity(similarities, mask, 10_000).tolist() == [
        i for i in np.argsort(-similarities) if mask[i]
    ]
    assert top_by_similarity(similarities, np.zeros(1000, bool), 5).size == 0


def test_nearest_is_exact_cosine_over_live_rows() -> None:
    vectors = random_vectors(500)
    ids = [f"m{i:03d}" for i in range(500)]
    held = AgentVectors.from_rows(DIM, rows(ids, vectors, [address(0, i) for i in range(500)]))
    query = random_vectors(1, seed=9)[0]
    hits = held.nearest(MemoryFilter("a"), query.tolist(), 40)
    cosine = unit_rows(vectors) @ (query / np.linalg.norm(query))
    assert [h.memory_id for h in hits] == [ids[i] for i in np.argsort(-cosine)[:40]]
    assert hits[0].distance == pytest.approx(1 - cosine.max(), abs=1e-5)
    assert hits[0].address == address(0, int(np.argmax(cosine)))
    assert held.rows == 500 and held.fragments() == {0}


def test_filter_masks_types_consolidated_time_and_subject() -> None:
    held = AgentVectors.from_rows(
        DIM,
        rows(
            ["f1", "f2", "e1", "e2"],
            random_vectors(4),
            [address(0, i) for i in range(4)],
            types=["fact", "fact", "episode", "episode"],
            consolidated=[False, True, False, True],
            subjects=["user.city", "user.city", None, None],
            minutes=[0, 10, 20, 30],
        ),
    )

    def admitted(where: MemoryFilter) -> set[str]:
        return {h.memory_id for h in held.nearest(where, [1.0] * DIM, 10)}

    assert admitted(MemoryFilter("a")) == {"f1", "e1"}
    assert admitted(MemoryFilter("a", include_consolidated=True)) == {"f1", "f2", "e1", "e2"}
    assert admitted(MemoryFilter("a", types=("fact",), include_consolidated=True)) == {"f1", "f2"}
    assert admitted(MemoryFilter("a", types=("summary",))) == set()
    before = T0 + timedelta(minutes=15)
    assert admitted(MemoryFilter("a", created_before=before, include_consolidated=True)) == {
        "f1",
        "f2",
    }
    assert admitted(MemoryFilter("a", subject="user.city")) == {"f1"}


def test_upsert_replaces_by_id_and_fragments_drop_or_keep_live() -> None:
    vectors = random_vectors(6)
    held = AgentVectors.from_rows(
        DIM, rows(["a", "b", "c", "d"], vectors[:4], [address(0, i) for i in range(4)])
    )
    # An update of "b": its new row arrives in fragment 1 (the old one is deleted in fragment 0).
    held.upsert(rows(["b"], vectors[4:5], [address(1, 0)]))
    assert held.rows == 4
    assert held.vectors(["b"])["b"] == pytest.approx(unit_rows(vectors[4:5])[0].tolist())
    assert held.memories(["b", "zz"])["b"].content == "content of b"
    # Fragment 0 lost "b" (offset 1) and "d" (offset 3): only live addresses stay.
    gone = held.keep_live({0}, np.array([address(0, 0), address(0, 2)], np.uint64))
    assert gone == 1  # "d"; "b"'s old slot was already replaced
    assert {h.memory_id for h in held.nearest(MemoryFilter("a"), [1.0] * DIM, 10)} == {
        "a",
        "b",
        "c",
    }
    assert held.drop_fragments({0}) == 2 and held.fragments() == {1}
    assert set(held.memories(["a", "b", "c"])) == {"b"}


def test_tombstones_are_compacted_and_the_rows_stay_consistent() -> None:
    held = AgentVectors(DIM)
    for round_ in range(30):  # the same 100 ids updated 30 times: 2,900 dead slots
        vectors = random_vectors(100, seed=round_)
        ids = [f"m{i}" for i in range(100)]
        held.upsert(rows(ids, vectors, [address(round_, i) for i in range(100)]))
    assert held.rows == 100
    assert held.nbytes < 100 * (DIM * 4 + 2000) * 3
    query = random_vectors(1, seed=99)[0]
    best = held.nearest(MemoryFilter("a"), query.tolist(), 1)[0]
    cosine = unit_rows(random_vectors(100, seed=29)) @ (query / np.linalg.norm(query))
    assert best.memory_id == f"m{int(np.argmax(cosine))}"
    assert held.memories([best.memory_id])[best.memory_id].id == best.memory_id


# ---------------------------------------------------------------------------- freshness

EMBED_DIM = 64


def open_service(
    root: Path | str, tuning: VectorTuning, endpoint_url: str | None = None
) -> MemoryService:
    """A connection of its own to the memories under ``root`` (a directory or ``s3://...``)."""
    table = MemoryTable(f"{root}/lance", EMBED_DIM, tuning=tuning, endpoint_url=endpoint_url)
    objects = open_object_store(f"{root}/objects", endpoint_url)
    return MemoryService(MemoryOps(table, objects), HashingEmbedder(EMBED_DIM))


def search_ids(service: MemoryService, agent: str, query: str, **options: object) -> list[str]:
    request = SearchRequest(query, k=5, **options)  # type: ignore[arg-type]
    return [h.memory.id for h in asyncio.run(service.search(agent, request))]


def freshness_scenario(writer: MemoryService, reader: MemoryService, exact: MemoryService) -> None:
    """``writer`` changes the table in every way the product does; after each change ``reader``
    (resident) must return what ``exact`` (a third connection, no resident cache) returns, and
    must have refreshed incrementally rather than reloaded."""
    write = writer.write
    episodes = [NewMemory(type="episode", content=f"we talked about topic {i}") for i in range(30)]
    asyncio.run(write("agent-r", episodes))
    asyncio.run(write("agent-other", episodes[:5]))
    cache = reader.ops.resident

    def agree(query: str, **options: object) -> list[str]:
        found = search_ids(reader, "agent-r", query, **options)
        assert found == search_ids(exact, "agent-r", query, **options)
        return found

    agree("topic 7")
    assert cache.held_agents() == ["agent-r"] and cache.loads == 1

    # An append by the other connection, then one by another agent.
    (new,) = asyncio.run(write("agent-r", [NewMemory(content="the launch date is friday")]))
    assert agree("launch date friday")[0] == new.memory.id
    asyncio.run(write("agent-other", [NewMemory(content="the launch date is monday")]))
    assert agree("launch date friday")[0] == new.memory.id

    # An update in place (a fact on a known subject keeps its id).
    fact = NewMemory(type="fact", subject="user.city", content="the user lives in lisbon")
    (first,) = asyncio.run(write("agent-r", [fact]))
    moved = fact.model_copy(update={"content": "the user lives in porto now"})
    (second,) = asyncio.run(write("agent-r", [moved]))
    assert second.action == "updated" and second.memory.id == first.memory.id
    hits = asyncio.run(reader.search("agent-r", SearchRequest("user lives porto", k=1)))
    assert hits[0].memory.id == first.memory.id and "porto" in hits[0].memory.content

    # A delete.
    asyncio.run(writer.delete("agent-r", new.memory.id))
    assert new.memory.id not in agree("launch date friday")

    # Consolidation: episodes folded into a summary are skipped unless asked for.
    folded = search_ids(exact, "agent-r", "topic 3")[:2]
    writer.ops.mark_consolidated(folded, "mem_summary", [None, None], datetime.now(UTC))
    assert not set(folded) & set(agree("topic 3"))
    assert set(folded) <= set(agree("topic 3", include_consolidated=True))

    # The embed job's re-embedding (same updated_at, a new vector).
    target = agree("topic 11")[0]
    stamp = writer.ops.get("agent-r", target).updated_at
    away = asyncio.run(writer.embedder.embed(["completely unrelated words"]))[0]
    assert writer.ops.set_vectors([target], [away], "other-model", [stamp]) == 1
    assert target not in agree("topic 11")[:1]

    # Indexes and a compaction: every row moves to a new fragment.
    writer.ops.table.ensure_indexes()
    writer.ops.table.table.optimize()
    agree("topic 5")
    agree("user lives porto")
    assert cache.loads == 1 and cache.refreshes >= 6  # one per change above, never a reload


def test_a_resident_reader_sees_every_commit_of_another_connection(tmp_path: Path) -> None:
    writer = open_service(tmp_path, VectorTuning(resident_mib=0))
    reader = open_service(tmp_path, VectorTuning())
    exact = open_service(tmp_path, VectorTuning(resident_mib=0))
    freshness_scenario(writer, reader, exact)


def test_the_cache_keeps_to_its_bounds(tmp_path: Path) -> None:
    writer = open_service(tmp_path, VectorTuning(resident_mib=0))
    for agent in ("a1", "a2", "a3"):
        contents = [NewMemory(content=f"{agent} memory {i}") for i in range(40)]
        asyncio.run(writer.write(agent, contents, dedupe="none"))
    reader = open_service(tmp_path, VectorTuning(resident_max_rows=50))
    cache = reader.ops.resident
    per_agent = None
    for agent in ("a1", "a2"):
        search_ids(reader, agent, "memory 3")
        per_agent = per_agent or cache.held_bytes
    assert per_agent and cache.held_agents() == ["a1", "a2"]
    cache.budget_bytes = 2 * per_agent + per_agent // 2  # room for two agents
    search_ids(reader, "a3", "memory 3")
    assert cache.held_agents() == ["a2", "a3"]  # the least recently searched went
    assert cache.held_bytes <= cache.budget_bytes
    # Over the row limit: searched through the index path, not held.
    more = [NewMemory(content=f"a3 extra {i}") for i in range(20)]
    asyncio.run(writer.write("a3", more, dedupe="none"))
    bigger = open_service(tmp_path, dataclasses.replace(VectorTuning(), resident_max_rows=50))
    assert search_ids(bigger, "a3", "a3 extra 7")
    assert bigger.ops.resident.held_agents() == []
