"""The memory store on a real LanceDB directory and a local object store (no Ray)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import Conflict, InvalidInput, NotFound
from core.memory import (
    HashingEmbedder,
    LocalObjectStore,
    MemoryEdit,
    MemoryOps,
    MemoryService,
    MemoryTable,
    NewMemory,
    SearchMode,
    SearchRequest,
)
from core.memory.filters import MemoryFilter
from core.memory.records import INLINE_LIMIT_BYTES, RankWeights
from core.memory.tuning import VectorTuning

DIM = 64


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture(params=["resident", "index"])
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MemoryService]:
    """Each test on both search paths: vectors resident in this process (the default), and
    LanceDB's (an agent too large to hold)."""
    tuning = VectorTuning() if request.param == "resident" else VectorTuning(resident_mib=0)
    table = MemoryTable(str(tmp_path / "lance"), DIM, tuning=tuning)
    ops = MemoryOps(table, LocalObjectStore(tmp_path / "objects"))
    yield MemoryService(ops, HashingEmbedder(DIM), clock=Clock())


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def write(service: MemoryService, agent: str, *memories: NewMemory) -> list[str]:
    return [o.memory.id for o in run(service.write(agent, list(memories)))]


def test_write_read_list_delete_round_trip(service: MemoryService) -> None:
    first, second = write(
        service,
        "agent-a",
        NewMemory(
            type="fact",
            content="The user likes green tea",
            significance=0.7,
            metadata={"source": "t1"},
        ),
        NewMemory(type="episode", content="We discussed the launch plan"),
    )
    memory = run(service.read("agent-a", first))
    assert (memory.content, memory.type, memory.significance) == (
        "The user likes green tea",
        "fact",
        pytest.approx(0.7),
    )
    assert memory.metadata == {"source": "t1"} and memory.embedding_model == "hashing"
    assert [m.id for m in run(service.recent("agent-a"))] == [second, first]
    assert [m.id for m in run(service.recent("agent-a", types=["fact"]))] == [first]
    assert [m.id for m in run(service.recent("agent-a", before_id=second))] == [first]
    run(service.delete("agent-a", first))
    with pytest.raises(NotFound):
        run(service.read("agent-a", first))


def test_large_content_lives_in_the_object_store(service: MemoryService, tmp_path: Path) -> None:
    big = "transcript line\n" * 1000
    assert len(big.encode()) > INLINE_LIMIT_BYTES
    (memory_id,) = write(service, "agent-a", NewMemory(type="episode", content=big))
    row = service.ops.get("agent-a", memory_id)
    assert row.content == "" and row.content_ref == f"agent-a/{memory_id}"
    assert (tmp_path / "objects" / "agent-a" / memory_id).read_text() == big
    assert run(service.read("agent-a", memory_id)).content == big
    hits = run(service.search("agent-a", SearchRequest("transcript line", k=1)))
    assert hits[0].memory.id == memory_id
    run(service.delete("agent-a", memory_id))
    assert not (tmp_path / "objects" / "agent-a" / memory_id).exists()


def test_agents_never_see_each_others_memories(service: MemoryService) -> None:
    (mine,) = write(service, "agent-a", NewMemory(content="secret launch codes"))
    write(service, "agent-b", NewMemory(content="grocery list"))
    for mode in SearchMode:
        hits = run(service.search("agent-b", SearchRequest("secret launch codes", mode=mode)))
        assert mine not in [h.memory.id for h in hits]
    with pytest.raises(NotFound):
        run(service.read("agent-b", mine))
    with pytest.raises(NotFound):
        run(service.delete("agent-b", mine))


@pytest.mark.parametrize("mode", list(SearchMode))
def test_search_modes_find_the_matching_memory(service: MemoryService, mode: SearchMode) -> None:
    ids = write(
        service,
        "agent-a",
        NewMemory(content="the deployment pipeline uses kubernetes"),
        NewMemory(content="my cat is called whiskers"),
        NewMemory(content="lunch was pasta with tomato sauce"),
    )
    hits = run(service.search("agent-a", SearchRequest("cat whiskers", k=2, mode=mode)))
    assert hits[0].memory.id == ids[1]
    assert 0.0 <= hits[-1].relevance <= hits[0].relevance <= 1.0


def test_search_filters_types_and_ranks_by_significance(service: MemoryService) -> None:
    relevant, important, _ = write(
        service,
        "agent-a",
        NewMemory(type="note", content="project alpha deadline friday deadline", significance=0.0),
        NewMemory(type="decision", content="project alpha deadline", significance=1.0),
        NewMemory(type="episode", content="project alpha deadline friday deadline"),
    )
    request = SearchRequest("friday deadline", k=3, types=("note", "decision"))
    by_relevance = run(
        service.search(
            "agent-a", dataclasses.replace(request, weights=RankWeights(significance=0.0))
        )
    )
    assert [h.memory.id for h in by_relevance] == [relevant, important]
    ranked = run(service.search("agent-a", request))
    assert [h.memory.id for h in ranked] == [important, relevant]


def test_a_fact_on_a_known_subject_updates_instead_of_duplicating(service: MemoryService) -> None:
    (first,) = write(
        service,
        "agent-a",
        NewMemory(type="fact", subject="user.city", content="The user lives in Paris"),
    )
    outcomes = run(
        service.write(
            "agent-a",
            [
                NewMemory(
                    type="fact",
                    subject="user.city",
                    content="The user lives in Berlin",
                    significance=0.8,
                )
            ],
        )
    )
    assert outcomes[0].action == "updated" and outcomes[0].memory.id == first
    facts = run(service.recent("agent-a", types=["fact"]))
    assert [(m.id, m.content) for m in facts] == [(first, "The user lives in Berlin")]
    assert facts[0].metadata["history"][0]["content"] == "The user lives in Paris"
    hits = run(service.search("agent-a", SearchRequest("Berlin", mode=SearchMode.FTS)))
    assert [h.memory.id for h in hits] == [first]


def test_a_near_identical_fact_updates_and_dedupe_none_adds(service: MemoryService) -> None:
    (first,) = write(service, "agent-a", NewMemory(type="fact", content="The user prefers tea"))
    again = run(service.write("agent-a", [NewMemory(type="fact", content="the user prefers TEA")]))
    assert (again[0].action, again[0].memory.id) == ("updated", first)
    forced = run(
        service.write(
            "agent-a", [NewMemory(type="fact", content="The user prefers tea")], dedupe="none"
        )
    )
    assert forced[0].action == "created"
    assert service.ops.count(MemoryFilter("agent-a")) == 2


def test_facts_with_one_subject_in_one_batch_leave_one_fact(service: MemoryService) -> None:
    outcomes = run(
        service.write(
            "agent-a",
            [
                NewMemory(type="fact", subject="pet", content="The user has a dog"),
                NewMemory(type="fact", subject="pet", content="The user has a parrot"),
            ],
        )
    )
    assert [o.action for o in outcomes] == ["created", "updated"]
    assert service.ops.count(MemoryFilter("agent-a", types=("fact",))) == 1


def test_indexes_are_created_once_and_search_still_works(service: MemoryService) -> None:
    write(
        service,
        "agent-a",
        *[NewMemory(content=f"memory number {i} about topic {i % 7}") for i in range(300)],
    )
    created = service.ops.table.ensure_indexes(vector_index_min_rows=256)
    assert set(created) == {"agent_id", "type", "consolidated_into", "id", "content", "vector"}
    assert service.ops.table.ensure_indexes(vector_index_min_rows=256) == []
    hits = run(service.search("agent-a", SearchRequest("memory number 42 about topic 0", k=3)))
    assert hits and hits[0].memory.content == "memory number 42 about topic 0"


def ivf_partitions(table: MemoryTable) -> list[int]:
    import lance

    stats = lance.dataset(table.dataset_uri).stats.index_stats("vector_idx")
    return [int(index["num_partitions"]) for index in stats["indices"]]


def test_the_vector_index_keeps_its_partitions_through_optimize_and_is_searched(
    tmp_path: Path,
) -> None:
    # Through the index even for a small agent (flat_max_rows=0), two agents sharing the table.
    tuning = VectorTuning(partition_rows=25, flat_max_rows=0, resident_mib=0)
    table = MemoryTable(str(tmp_path / "lance"), DIM, tuning=tuning)
    service = MemoryService(
        MemoryOps(table, LocalObjectStore(tmp_path / "o")), HashingEmbedder(DIM)
    )
    for agent in ("agent-a", "agent-b"):
        contents = [f"{agent} memory {i} about topic {i % 7}" for i in range(200)]
        run(service.write(agent, [NewMemory(content=c) for c in contents], dedupe="none"))
    assert "vector" in table.ensure_indexes(vector_index_min_rows=256)
    assert ivf_partitions(table)[0] >= 12  # 400 rows, 25 per partition
    table.table.optimize()  # what the compact job runs next
    # LanceDB merges the partitions of an index built with num_partitions down to its own
    # target size (1,000 -> 31 at 1M rows); one built with a target size keeps most of them.
    assert ivf_partitions(table)[0] >= 8
    assert service.ops.nearest(MemoryFilter("agent-a"), [1.0] * DIM, 5)  # never short
    hits = run(service.search("agent-a", SearchRequest("agent-a memory 42 about topic 0", k=3)))
    assert hits[0].memory.content == "agent-a memory 42 about topic 0"
    assert {h.memory.agent_id for h in hits} == {"agent-a"}

    table.tuning = dataclasses.replace(tuning, index="ivf_pq")
    table.rebuild_vector_index()
    assert table.index_names()["vector"] == "IvfPq"
    hits = run(service.search("agent-b", SearchRequest("agent-b memory 7 about topic 0", k=1)))
    assert hits[0].memory.content == "agent-b memory 7 about topic 0"


def test_set_vectors_skips_rows_edited_since_they_were_read(service: MemoryService) -> None:
    (memory_id,) = write(service, "agent-a", NewMemory(type="fact", subject="s", content="v1"))
    stale = service.ops.get("agent-a", memory_id)
    write(service, "agent-a", NewMemory(type="fact", subject="s", content="v2"))
    assert service.ops.set_vectors([memory_id], [[0.0] * DIM], "other", [stale.updated_at]) == 0
    fresh = service.ops.get("agent-a", memory_id)
    assert service.ops.set_vectors([memory_id], [[1.0] * DIM], "other", [fresh.updated_at]) == 1
    assert service.ops.get("agent-a", memory_id).embedding_model == "other"


def test_invalid_requests(service: MemoryService, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        run(service.search("agent-a", SearchRequest("  ")))
    with pytest.raises(InvalidInput):
        run(service.search("agent-a", SearchRequest("q", k=0)))
    with pytest.raises(InvalidInput):
        MemoryTable(str(tmp_path / "lance"), DIM + 1)


def test_partial_merges_work_on_an_indexed_table_and_retention_drops_archived_rows(
    service: MemoryService,
) -> None:
    # The compact job's indexes (a BTREE on id among them) are in place before consolidation
    # marks rows and the embed job re-embeds them: both merge some columns only.
    ids = write(service, "agent-a", *[NewMemory(type="episode", content=f"e{i}") for i in range(4)])
    service.ops.table.ensure_indexes(vector_index_min_rows=10**6)
    assert "id" in service.ops.table.index_names()
    folded_at = datetime(2026, 2, 1, tzinfo=UTC)
    refs = [f"agent-a/{i}" for i in ids[:3]]
    assert service.ops.mark_consolidated(ids[:3], "mem_summary", refs, folded_at) == 3
    stamp = service.ops.get("agent-a", ids[3]).updated_at
    assert service.ops.set_vectors([ids[3]], [[1.0] * DIM], "other", [stamp]) == 1
    # Retention: rows folded before the cutoff go (only archived episodes, only this agent's).
    assert service.ops.drop_archived("agent-a", folded_at) == 0
    assert service.ops.drop_archived("agent-b", folded_at + timedelta(days=1)) == 0
    assert service.ops.drop_archived("agent-a", folded_at + timedelta(days=1)) == 3
    left = service.ops.list_all(MemoryFilter("agent-a", include_consolidated=True))
    assert [m.id for m in left] == [ids[3]]
    hits = run(service.search("agent-a", SearchRequest("e0", k=5, include_consolidated=True)))
    assert [h.memory.id for h in hits] == [ids[3]]


def test_an_edited_content_is_embedded_again_and_found_by_its_new_text(
    service: MemoryService,
) -> None:
    old_text = "the standup meeting is on mondays"
    first, _ = write(
        service,
        "agent-a",
        NewMemory(type="fact", content=old_text, subject="standup", metadata={"src": "t1"}),
        NewMemory(content="my cat is called whiskers"),
    )
    edited = run(service.edit("agent-a", first, MemoryEdit(content="bicycle repair on fridays")))
    assert edited.content == "bicycle repair on fridays" and edited.subject == "standup"
    assert edited.metadata["src"] == "t1"
    assert [h["content"] for h in edited.metadata["history"]] == [old_text]  # type: ignore[index,union-attr]
    stored = run(service.read("agent-a", first))
    assert stored.content == "bicycle repair on fridays" and stored.updated_at > stored.created_at
    for mode in SearchMode:
        hits = run(service.search("agent-a", SearchRequest("bicycle repair fridays", mode=mode)))
        assert hits[0].memory.id == first, mode
        assert hits[0].memory.content == "bicycle repair on fridays"
    # The stored vector is the new text's: the new text's embedding is its nearest neighbour.
    (vector,) = run(service.embedder.embed(["bicycle repair on fridays"]))
    assert service.ops.stored_vector("agent-a", first) == pytest.approx(vector, abs=1e-6)


def test_an_edit_of_other_fields_keeps_the_vector(service: MemoryService) -> None:
    (memory_id,) = write(
        service, "agent-a", NewMemory(type="fact", content="tea is green", subject="tea")
    )
    before = service.ops.stored_vector("agent-a", memory_id)
    edit = MemoryEdit(type="decision", significance=0.9, subject=None, metadata={"tags": ["x"]})
    edited = run(service.edit("agent-a", memory_id, edit))
    assert (edited.type, edited.significance, edited.subject) == ("decision", 0.9, None)
    assert edited.metadata == {"tags": ["x"]} and edited.content == "tea is green"
    assert service.ops.stored_vector("agent-a", memory_id) == before
    assert run(service.read("agent-a", memory_id)).type == "decision"
    # Nulls keep their fields (subject: clears it); an edit that changes nothing writes nothing.
    same = run(service.edit("agent-a", memory_id, MemoryEdit(content=None, subject=None)))
    assert same == run(service.read("agent-a", memory_id)) and same.updated_at == edited.updated_at


def test_an_edit_moves_content_in_and_out_of_the_object_store(
    service: MemoryService, tmp_path: Path
) -> None:
    (memory_id,) = write(service, "agent-a", NewMemory(content="short"))
    big = "transcript line\n" * 1000
    obj = tmp_path / "objects" / "agent-a" / memory_id
    assert run(service.edit("agent-a", memory_id, MemoryEdit(content=big))).content == big
    assert obj.read_text() == big and service.ops.get("agent-a", memory_id).content == ""
    assert run(service.read("agent-a", memory_id)).content == big
    run(service.edit("agent-a", memory_id, MemoryEdit(content="short again")))
    assert not obj.exists()
    assert service.ops.get("agent-a", memory_id).content == "short again"


def test_edits_refused(service: MemoryService) -> None:
    (mine,) = write(service, "agent-a", NewMemory(content="secret launch codes"))
    with pytest.raises(NotFound):
        run(service.edit("agent-b", mine, MemoryEdit(content="overwritten")))
    with pytest.raises(NotFound):
        run(service.edit("agent-a", "mem_missing", MemoryEdit(significance=0.1)))
    assert run(service.read("agent-a", mine)).content == "secret launch codes"
    with pytest.raises(InvalidInput):
        run(service.edit("agent-a", mine, MemoryEdit(content="x" * (2 * 1024 * 1024))))
    service.ops.mark_consolidated([mine], "mem_summary", [None], datetime(2026, 2, 1, tzinfo=UTC))
    with pytest.raises(Conflict, match="mem_summary"):
        run(service.edit("agent-a", mine, MemoryEdit(significance=0.1)))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"content": ""},
        {"significance": 1.5},
        {"type": "Not A Type"},
        {"id": "mem_other"},
        {"agent_id": "agent-b"},
        {"metadata": {"blob": "x" * 20000}},
    ],
)
def test_edit_bodies_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        MemoryEdit.model_validate(body)


@pytest.mark.parametrize(
    ("table_rows", "searchable", "flat_max", "expected"),
    [
        (1_000_000, 800, 1_000, None),  # an agent kept small by its upkeep: exact, flat
        (1_000_000, 1_000, 1_000, None),
        (1_000_000, 1_001, 1_000, 100),  # 1,000 partitions, 100 rows wanted of 1,001: 100 probes
        (1_000_000, 10_000, 1_000, 20),  # at least nprobes
        (1_000_000, 10, 0, 1_000),  # a tiny agent through the index probes every partition
    ],
)
def test_the_search_plan_counts_only_rows_the_prefilter_can_keep(
    table_rows: int, searchable: int, flat_max: int, expected: int | None
) -> None:
    tuning = VectorTuning(flat_max_rows=flat_max)
    assert tuning.plan(table_rows, searchable) == expected


def test_an_agent_mostly_folded_is_searched_exactly_not_short(tmp_path: Path) -> None:
    # An agent whose upkeep folded most of its rows, in an indexed table. Probed as if all its
    # rows could match, the index would look at a tenth of the partitions and find about a tenth
    # of the few searchable rows: a search short of results, and the wrong ones.
    tuning = VectorTuning(partition_rows=25, nprobes=1, flat_max_rows=5, resident_mib=0)
    table = MemoryTable(str(tmp_path / "lance"), DIM, tuning=tuning)
    service = MemoryService(
        MemoryOps(table, LocalObjectStore(tmp_path / "objects")), HashingEmbedder(DIM)
    )
    other = [NewMemory(content=f"another agent's note {i} on topic {i % 13}") for i in range(1000)]
    run(service.write("agent-b", other, dedupe="none"))
    mine = [
        NewMemory(type="episode", content=f"day {i}: step {i} of the move") for i in range(1000)
    ]
    ids = [o.memory.id for o in run(service.write("agent-a", mine, dedupe="none"))]
    assert "vector" in table.ensure_indexes(vector_index_min_rows=256)
    (summary,) = write(
        service, "agent-a", NewMemory(type="summary", content="the move, days 0-995")
    )
    folded = service.ops.mark_consolidated(ids[:996], summary, [None] * 996, datetime.now(UTC))
    assert folded == 996
    ops = MemoryOps(table, LocalObjectStore(tmp_path / "objects"))
    assert (ops.agent_rows("agent-a"), ops.searchable_rows(MemoryFilter("agent-a"))) == (1001, 5)
    # Asked about something else: the partitions probed first hold other rows.
    (query,) = run(HashingEmbedder(DIM).embed(["another agent's note 7 on topic 7"]))
    found = ops.nearest(MemoryFilter("agent-a"), query, 5)
    assert {n.memory_id for n in found} == {*ids[996:], summary}


def test_folded_rows_do_not_count_toward_the_search_plan(tmp_path: Path) -> None:
    table = MemoryTable(str(tmp_path / "lance"), DIM, tuning=VectorTuning(resident_mib=0))
    service = MemoryService(
        MemoryOps(table, LocalObjectStore(tmp_path / "objects")), HashingEmbedder(DIM)
    )
    episodes = [
        NewMemory(type="episode", content=f"day {i}: worked on step {i}") for i in range(12)
    ]
    ids = [o.memory.id for o in run(service.write("agent-a", episodes, dedupe="none"))]
    (summary,) = write(service, "agent-a", NewMemory(type="summary", content="steps 0 to 9"))
    folded = service.ops.mark_consolidated(ids[:10], summary, [None] * 10, datetime.now(UTC))
    assert folded == 10
    ops = MemoryOps(table, LocalObjectStore(tmp_path / "objects"))  # a fresh count cache
    assert ops.agent_rows("agent-a") == 13
    assert ops.searchable_rows(MemoryFilter("agent-a")) == 3  # two episodes and the summary
    assert ops.searchable_rows(MemoryFilter("agent-a", include_consolidated=True)) == 13
    # Searched flat (3 <= flat_max_rows), exactly: the nearest is the text itself.
    hits = run(service.search("agent-a", SearchRequest("day 11: worked on step 11", k=1)))
    assert hits[0].memory.content == "day 11: worked on step 11"
