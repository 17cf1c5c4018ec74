"""``python -m jobs.compact``: LanceDB upkeep for the memories table.

Creates the indexes that are missing (BITMAP ``agent_id``/``type``, BTREE ``id``, FTS ``content``,
and the vector index of ``WONDER_MEMORY_VECTOR_INDEX`` once the table reaches
``--vector-index-min-rows``; ``--rebuild-vector-index`` replaces an existing one), then
``optimize()``: small fragments from one-row appends are compacted, new rows are added to every
index, and versions older than ``--keep-versions-hours`` are removed. LanceDB commits are
optimistic, so this is safe while conversations write (a conflicting commit is retried).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from core.memory import MemoryOps, open_existing_memory_ops
from core.memory.operations import with_commit_retries
from core.memory.tuning import VECTOR_INDEX_MIN_ROWS
from core.settings import Settings
from jobs.runtime import Progress, job_settings, print_result


@dataclass(frozen=True)
class CompactOptions:
    vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS
    keep_versions: timedelta = timedelta(hours=24)
    rebuild_vector_index: bool = False


def table_stats(ops: MemoryOps) -> dict[str, Any]:
    stats = ops.table.table.stats()
    fragments = stats.get("fragment_stats") or {}
    unindexed = {
        ",".join(i.columns): int(getattr(i, "num_unindexed_rows", 0) or 0)
        for i in ops.table.table.list_indices()
    }
    return {
        "rows": int(stats.get("num_rows") or 0),
        "fragments": int(fragments.get("num_fragments") or 0),
        "small_fragments": int(fragments.get("num_small_fragments") or 0),
        "indexes": sorted(unindexed),
        "unindexed_rows": unindexed,
    }


def run_compact(options: CompactOptions, settings: Settings | None = None) -> dict[str, Any]:
    """Indexes, then ``optimize()``, on the memories table of ``settings`` (default: the job's
    environment's)."""
    say = Progress("compact")
    settings = settings or job_settings()
    ops = open_existing_memory_ops(settings, settings.memory_tuning)
    before = table_stats(ops)
    say.say(
        f"before: {before['rows']} rows in {before['fragments']} fragments, "
        f"indexes {before['indexes']}"
    )
    created = with_commit_retries(lambda: ops.table.ensure_indexes(options.vector_index_min_rows))
    if created:
        say.say(f"created indexes on {created}")
    if (
        options.rebuild_vector_index
        and "vector" in ops.table.index_names()
        and "vector" not in created
    ):
        with_commit_retries(ops.table.rebuild_vector_index)
        created.append("vector")
        say.say(f"rebuilt the vector index ({ops.table.tuning.index})")
    with_commit_retries(lambda: ops.table.table.optimize(cleanup_older_than=options.keep_versions))
    after = table_stats(ops)
    say.say(
        f"after: {after['rows']} rows in {after['fragments']} fragments, "
        f"unindexed rows {after['unindexed_rows']}"
    )
    return {
        "job": "compact",
        "created_indexes": created,
        "before": before,
        "after": after,
        "seconds": round(say.elapsed(), 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (``wonder job compact --help`` shows them)."""
    parser.add_argument(
        "--vector-index-min-rows",
        type=int,
        default=VECTOR_INDEX_MIN_ROWS,
        help="build the vector index once the table has this many rows (default %(default)s)",
    )
    parser.add_argument(
        "--keep-versions-hours",
        type=float,
        default=24.0,
        help="remove table versions older than this (default %(default)s)",
    )
    parser.add_argument(
        "--rebuild-vector-index",
        action="store_true",
        help="replace the vector index per the WONDER_MEMORY_* settings (another kind or "
        "partition size; indexes built before this option merged their partitions away)",
    )


def parse_args(argv: list[str] | None) -> CompactOptions:
    parser = argparse.ArgumentParser(prog="python -m jobs.compact", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return CompactOptions(
        vector_index_min_rows=args.vector_index_min_rows,
        keep_versions=timedelta(hours=args.keep_versions_hours),
        rebuild_vector_index=args.rebuild_vector_index,
    )


def main(argv: list[str] | None = None) -> int:
    # Compaction is one process's work: no Ray needed (it still runs as a Ray Job).
    print_result(run_compact(parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
