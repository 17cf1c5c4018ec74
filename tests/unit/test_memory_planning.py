"""Pure memory decisions: which fact a new one updates; how episodes fold into summaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.memory.planning import (
    edited_memory,
    extractive_summary,
    plan_fact_merges,
    plan_groups,
    summary_id_for,
    unfinished_groups,
    update_target,
    updated_metadata,
)
from core.memory.records import Memory, MemoryEdit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def mem(
    memory_id: str,
    kind: str = "fact",
    *,
    minutes: int = 0,
    subject: str | None = None,
    significance: float = 0.5,
    content: str = "x",
    consolidated_into: str | None = None,
    metadata: dict[str, object] | None = None,
) -> Memory:
    at = T0 + timedelta(minutes=minutes)
    return Memory(
        id=memory_id,
        agent_id="a",
        type=kind,
        content=content,
        significance=significance,
        subject=subject,
        created_at=at,
        updated_at=at,
        consolidated_into=consolidated_into,
        metadata=metadata or {},
    )


@pytest.mark.parametrize(
    ("kind", "same_subject", "nearest", "expected"),
    [
        ("fact", [], None, None),
        ("fact", [mem("old", minutes=1), mem("older")], None, "old"),
        ("fact", [], (mem("near"), 0.95), "near"),
        ("fact", [], (mem("far"), 0.5), None),
        ("decision", [], (mem("d", "decision"), 0.92), "d"),
        ("fact", [], (mem("d", "decision"), 0.99), None),  # nearest of another type
        ("episode", [mem("e", "episode")], (mem("e", "episode"), 1.0), None),
        ("fact", [mem("s")], (mem("near"), 0.99), "s"),  # subject beats similarity
    ],
)
def test_update_target(
    kind: str,
    same_subject: list[Memory],
    nearest: tuple[Memory, float] | None,
    expected: str | None,
) -> None:
    found = update_target(kind, same_subject, nearest, threshold=0.9)
    assert (found.id if found else None) == expected


def test_updated_metadata_keeps_bounded_history() -> None:
    old = mem("m", content="v6", metadata={"history": [{"content": f"v{i}"} for i in range(1, 6)]})
    meta = updated_metadata(old, {"source": "turn"})
    assert meta["source"] == "turn"
    assert [h["content"] for h in meta["history"]] == ["v2", "v3", "v4", "v5", "v6"]  # type: ignore[index]


def test_plan_groups_is_chronological_deterministic_and_skips_young_and_consolidated() -> None:
    episodes = [mem(f"e{i}", "episode", minutes=i) for i in range(7)]
    episodes.append(mem("done", "episode", minutes=-5, consolidated_into="s"))
    now = T0 + timedelta(minutes=10)
    groups = plan_groups(list(reversed(episodes)), now, timedelta(minutes=4), group_size=3)
    assert [g.source_ids for g in groups] == [["e0", "e1", "e2"], ["e3", "e4", "e5"]]
    again = plan_groups(episodes, now, timedelta(minutes=4), group_size=3)
    assert [g.summary_id for g in again] == [g.summary_id for g in groups]
    assert groups[0].summary_id.startswith("mem_")


def test_plan_groups_leaves_a_lone_episode() -> None:
    episodes = [mem(f"e{i}", "episode", minutes=i) for i in range(4)]
    groups = plan_groups(episodes, T0 + timedelta(days=1), timedelta(0), group_size=3)
    assert [g.source_ids for g in groups] == [["e0", "e1", "e2"]]


def test_summary_id_orders_like_its_newest_source() -> None:
    early = summary_id_for([mem("a", minutes=0)])
    late = summary_id_for([mem("b", minutes=60)])
    assert early < late


def test_unfinished_groups_finds_interrupted_runs() -> None:
    summaries = [
        mem("s1", "summary", metadata={"consolidation": True, "sources": ["e1", "e2"]}),
        mem("s2", "summary", metadata={"consolidation": True, "sources": ["e3"]}),
        mem("s3", "summary", metadata={"sources": ["e4"]}),  # written by someone else
    ]
    assert unfinished_groups(summaries, {"e2", "e4"}) == [("s1", ["e2"])]


def test_extractive_summary_prefers_significant_episodes_in_time_order() -> None:
    episodes = [
        (mem("e1", "episode", minutes=1, significance=0.2), "Talked about the weather. Long."),
        (mem("e2", "episode", minutes=2, significance=0.9), "User chose PostgreSQL! Because."),
        (mem("e3", "episode", minutes=3, significance=0.8), "Deployed to staging? Yes."),
    ]
    text = extractive_summary(episodes, max_chars=60)
    assert text.startswith("Summary of 3 episodes (2026-01-01 to 2026-01-01):")
    assert text.endswith("User chose PostgreSQL! Deployed to staging?")
    assert "weather" not in text


def test_plan_fact_merges_keeps_the_newest_per_subject() -> None:
    facts = [
        mem("f1", subject="name", minutes=1),
        mem("f2", subject="name", minutes=3),
        mem("f3", subject="name", minutes=2),
        mem("f4", subject="city"),
        mem("f5"),
        mem("e1", "episode", subject="name"),
    ]
    assert plan_fact_merges(facts) == [("f2", ["f1", "f3"])]


def test_pure_memory_modules_pull_in_no_infrastructure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, core.memory.planning, core.memory.ranking, core.memory.context;"
        "print(sorted(m for m in ('ray', 'lancedb', 'sqlalchemy', 'httpx', 'pyarrow', 's3fs')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            {"content": "new"},
            {
                "content": "new",
                "type": "fact",
                "subject": "s",
                "significance": 0.5,
                "metadata": {"k": 1, "history": [{"content": "old", "updated_at": T0.isoformat()}]},
            },
        ),
        (
            {"content": "old", "significance": 0.9},  # same text: no history entry
            {
                "content": "old",
                "type": "fact",
                "subject": "s",
                "significance": 0.9,
                "metadata": {"k": 1},
            },
        ),
        (
            {"subject": None, "type": "note", "metadata": {"tags": ["a"]}},
            {
                "content": "old",
                "type": "note",
                "subject": None,
                "significance": 0.5,
                "metadata": {"tags": ["a"]},
            },
        ),
        (
            {"content": None, "type": None, "metadata": None, "significance": 0.2},  # nulls keep
            {
                "content": "old",
                "type": "fact",
                "subject": "s",
                "significance": 0.2,
                "metadata": {"k": 1},
            },
        ),
        (
            {"significance": 0.0},
            {
                "content": "old",
                "type": "fact",
                "subject": "s",
                "significance": 0.0,
                "metadata": {"k": 1},
            },
        ),
    ],
)
def test_edited_memory(edit: dict[str, object], expected: dict[str, object]) -> None:
    old = mem("m", subject="s", content="old", metadata={"k": 1})
    now = T0 + timedelta(hours=1)
    new = edited_memory(old, MemoryEdit.model_validate(edit), now, "model-b")
    got = new.model_dump(include=set(expected))
    assert got == expected
    assert (new.id, new.created_at, new.updated_at, new.embedding_model) == (
        "m",
        T0,
        now,
        "model-b",
    )


def test_an_edit_keeps_the_earlier_history() -> None:
    history = [{"content": "first", "updated_at": T0.isoformat()}]
    old = mem("m", content="second", metadata={"history": history})
    replaced = edited_memory(old, MemoryEdit(metadata={"tags": []}), T0, "m")
    assert replaced.metadata == {"tags": [], "history": history}
    rewritten = edited_memory(old, MemoryEdit(content="third"), T0, "m")
    assert [h["content"] for h in rewritten.metadata["history"]] == ["first", "second"]  # type: ignore[index,union-attr]
