"""Memory search over a simulated month of writes, with the platform's upkeep on and off.

    .venv/bin/python benchmarks/memory_upkeep.py                  # 1M rows, 30 days
    .venv/bin/python benchmarks/memory_upkeep.py --rows 100000 --days 10   # quicker

Two copies of one table (shallow clones of ``benchmarks/memory_search.py``'s cached 1M-row
dataset with the product's IVF_SQ index, built by that script's code on first use): the target
agent owns 1 % of it (10k rows). Each simulated day, the same writes go to both copies, the way
the product makes them: the target agent's memory extraction appends ``--per-turn`` episodes per
turn (one commit each) for ``--turns-per-day`` turns, and other agents append
``--others-per-day`` rows in batches. Then, on the *upkeep* copy only, what the scheduler runs
at night: the agent's upkeep under its policy (``jobs.upkeep.run_agent_upkeep``: built-in
extractive consolidation of episodes older than a day in groups of ``--group-size``, then
retention of folded rows older than ``--archived-days``) and the table's compaction
(``jobs.compact.run_compact``; old versions are removed at once, as a month of hourly runs
keeping 24 h would leave about a day's). The clock is simulated (rows carry the simulated
day's timestamps; the policy's ages are measured against it).

After each day, the product's search (``MemoryService.search(k=10)``, vector mode, query vector
precomputed) of the target agent runs ``--queries`` times on each copy, interleaved query by
query, through the default path (resident vectors) and through the index path (what an agent
too large to hold gets, ``resident_mib=0``). A fresh service per day and path pays its cold load
in the ``--warmup`` queries, which are not counted. Printed per day: p50 per copy and path, the
agent's rows, the table's fragments and versions, and the upkeep's seconds; the last stdout line
is one JSON object with the first and last days' p50s, their ratios, and each day's no-upkeep
p50 over its upkeep p50 (the same-run figure: both copies are searched in the same minutes).

Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.memory_search import (
    TARGET,
    Precomputed,
    Synthetic,
    cached_dataset,
    cached_variant,
    content_of,
    product_index,
    say,
)
from core.ids import new_id
from core.memory.embedding import DEFAULT_DIM, Vector
from core.memory.filters import MemoryFilter
from core.memory.lance import MemoryTable
from core.memory.objects import LocalObjectStore
from core.memory.operations import MemoryOps
from core.memory.records import Memory
from core.memory.service import MemoryService, SearchRequest
from core.memory.tuning import VECTOR_INDEX_MIN_ROWS, VectorTuning
from core.memory_policy import MemoryUpkeepPolicy
from core.settings import Settings
from core.store import Store
from jobs.compact import CompactOptions, run_compact
from jobs.upkeep import UpkeepPorts, run_agent_upkeep

OTHERS_BATCH = 500
PATHS = {"resident": VectorTuning(), "index": VectorTuning(resident_mib=0)}


@dataclass
class SyntheticEmbedder:
    """Summaries' vectors: points of the dataset's distribution (no model in the loop)."""

    data: Synthetic

    @property
    def model_name(self) -> str:
        return "synthetic"

    @property
    def dim(self) -> int:
        return DEFAULT_DIM

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [list(map(float, row)) for row in self.data.points(len(texts))]


@dataclass
class FixedEmbedders:
    embedder_: SyntheticEmbedder

    async def embedder(self) -> SyntheticEmbedder:
        return self.embedder_


class Unused:
    """Ports the built-in strategy never calls (a library strategy would)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the extractive strategy does not use {name}")


@dataclass
class Copy:
    """One copy of the table (a shallow clone), with or without upkeep."""

    name: str
    root: Path
    upkeep: bool
    ops: MemoryOps = field(init=False)
    latencies: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ops = self.open(VectorTuning())

    @property
    def settings(self) -> Settings:
        return Settings(
            lance_uri=str(self.root / "lance"),
            object_uri=str(self.root / "objects"),
            data_dir=self.root,
        )

    def open(self, tuning: VectorTuning) -> MemoryOps:
        table = MemoryTable(str(self.root / "lance"), DEFAULT_DIM, tuning=tuning)
        return MemoryOps(table, LocalObjectStore(self.root / "objects"))

    def stats(self) -> dict[str, int]:
        dataset = self.root / "lance" / "memories.lance"
        versions = len(list((dataset / "_versions").glob("*.manifest")))
        fragments = len(self.ops.table.table.to_lance().get_fragments())
        agent = self.ops.count(MemoryFilter(TARGET, include_consolidated=True))
        searchable = self.ops.count(MemoryFilter(TARGET))
        return {
            "agent_rows": agent,
            "agent_searchable": searchable,
            "fragments": fragments,
            "versions": versions,
        }


def clone(variant: Path, into: Path) -> None:
    import lance

    source = lance.dataset(str(variant / "lance" / "memories.lance"))
    (into / "lance").mkdir(parents=True)
    source.shallow_clone(str(into / "lance" / "memories.lance"), source.version)


def rows_for(
    agent_of: Sequence[str], data: Synthetic, at: datetime, kind: str, start: int
) -> list[tuple[Memory, Vector]]:
    vectors = data.points(len(agent_of))
    sig = data.rng.random(len(agent_of))
    return [
        (
            Memory(
                id=new_id("mem"),
                agent_id=agent,
                type=kind,
                content=content_of(start + i),
                significance=float(sig[i]),
                created_at=at + timedelta(microseconds=i),
                updated_at=at + timedelta(microseconds=i),
                embedding_model="synthetic",
            ),
            list(map(float, vectors[i])),
        )
        for i, agent in enumerate(agent_of)
    ]


def write_day(copies: Sequence[Copy], day: int, at: datetime, args: argparse.Namespace) -> float:
    """The day's writes, the same to every copy; returns seconds per copy."""
    data = Synthetic.make(seed=1000 + day)
    started = time.perf_counter()
    serial = day * 10_000_000
    for turn in range(args.turns_per_day):
        when = at + timedelta(seconds=turn * 86_400 / max(1, args.turns_per_day))
        rows = rows_for([TARGET] * args.per_turn, data, when, "episode", serial + turn * 10)
        for copy in copies:
            copy.ops.insert(rows)
    for batch in range(0, args.others_per_day, OTHERS_BATCH):
        n = min(OTHERS_BATCH, args.others_per_day - batch)
        agents = [f"agent-{(batch + i) % 1000}" for i in range(n)]
        rows = rows_for(agents, data, at + timedelta(hours=12), "episode", serial + 5_000_000)
        for copy in copies:
            copy.ops.insert(rows)
    return (time.perf_counter() - started) / len(copies)


def upkeep_night(copy: Copy, now: datetime, policy: MemoryUpkeepPolicy) -> dict[str, Any]:
    """What the scheduler runs: the agent's upkeep, then the table's compaction."""
    ports = UpkeepPorts(
        store=Store.open("sqlite://"),
        chat_models=Unused(),  # type: ignore[arg-type]
        embedders=FixedEmbedders(SyntheticEmbedder(Synthetic.make(seed=99))),
        tasks=Unused(),  # type: ignore[arg-type]
        workflows=Unused(),  # type: ignore[arg-type]
        settings_env={},
    )
    started = time.perf_counter()
    agent = asyncio.run(run_agent_upkeep(TARGET, "bench", policy, now, copy.settings, ports))
    consolidated = time.perf_counter() - started
    compact = run_compact(CompactOptions(keep_versions=timedelta(0)), copy.settings)
    return {
        "summaries": agent.get("summaries", 0),
        "episodes_folded": agent.get("episodes_folded", 0),
        "rows_dropped": agent["archived_rows_dropped"],
        "upkeep_s": round(consolidated, 1),
        "compact_s": round(time.perf_counter() - started - consolidated, 1),
        "small_fragments_after": compact["after"]["small_fragments"],
    }


def search_day(
    copies: Sequence[Copy], queries: dict[str, Vector], warmup: int
) -> dict[str, dict[str, float]]:
    """p50 ms per copy and path; query by query, interleaved."""
    embedder = Precomputed(queries)
    services = {
        (copy.name, path): MemoryService(copy.open(tuning), embedder)  # type: ignore[arg-type]
        for copy in copies
        for path, tuning in PATHS.items()
    }
    times: dict[tuple[str, str], list[float]] = {key: [] for key in services}
    for n, name in enumerate(queries):
        for key, service in services.items():
            started = time.perf_counter()
            asyncio.run(service.search(TARGET, SearchRequest(name, k=10)))
            if n >= warmup:
                times[key].append((time.perf_counter() - started) * 1000)
    out: dict[str, dict[str, float]] = {}
    for (copy, path), values in times.items():
        out.setdefault(copy, {})[path] = round(statistics.median(values), 2)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    cache = Path(args.cache).expanduser()
    dataset = cached_dataset(cache, args.rows, 0.01)
    variant = (  # below VECTOR_INDEX_MIN_ROWS the product builds no vector index
        cached_variant(dataset, "ivf_sq-psqrt", product_index(VectorTuning()))
        if args.rows >= VECTOR_INDEX_MIN_ROWS
        else dataset
    )
    policy = MemoryUpkeepPolicy.model_validate(
        {
            "consolidation": {"after_hours": 24, "group_size": args.group_size},
            "retention": {"archived_days": args.archived_days},
        }
    )
    work = Path(tempfile.mkdtemp(prefix="wonder-bench-upkeep-", dir=args.workdir))
    try:
        copies = []
        for name, upkeep in (("upkeep", True), ("no_upkeep", False)):
            clone(variant, work / name)
            copies.append(Copy(name, work / name, upkeep))
        data = Synthetic.make(seed=4242)
        points = data.points(args.queries + args.warmup)
        start = datetime.now(UTC)
        days: list[dict[str, Any]] = []
        for day in range(args.days + 1):
            at = start + timedelta(days=day)
            record: dict[str, Any] = {"day": day}
            if day > 0:
                record["write_s_per_copy"] = round(write_day(copies, day, at, args), 1)
                record["upkeep"] = upkeep_night(copies[0], at + timedelta(hours=23), policy)
            queries = {f"d{day}-q{i}": list(map(float, p)) for i, p in enumerate(points)}
            record["p50_ms"] = search_day(copies, queries, args.warmup)
            record["stats"] = {copy.name: copy.stats() for copy in copies}
            days.append(record)
            say(json.dumps(record))
        return summary(days, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def summary(days: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    first, last = days[0], days[-1]

    def ratio(copy: str, path: str) -> float:
        return round(last["p50_ms"][copy][path] / max(first["p50_ms"][copy][path], 1e-9), 2)

    return {
        "rows": args.rows,
        "days": args.days,
        "target_writes_per_day": args.turns_per_day * args.per_turn,
        "others_writes_per_day": args.others_per_day,
        "search_p50_ms_day0": first["p50_ms"],
        "search_p50_ms_last_day": last["p50_ms"],
        "growth_last_over_day0": {
            copy: {path: ratio(copy, path) for path in PATHS} for copy in last["p50_ms"]
        },
        "stats_last_day": last["stats"],
        "per_day_p50_ms": [{"day": d["day"], **d["p50_ms"]} for d in days],
        "no_upkeep_over_upkeep": same_day_ratios(days),
    }


def same_day_ratios(days: list[dict[str, Any]]) -> dict[str, Any]:
    """No-upkeep p50 ÷ upkeep p50 of the same day and path (both copies searched interleaved,
    so a machine's load swings cancel out): per day, and the median over the days with writes."""
    per_day = [
        {
            "day": d["day"],
            **{
                path: round(
                    d["p50_ms"]["no_upkeep"][path] / max(d["p50_ms"]["upkeep"][path], 1e-9), 2
                )
                for path in PATHS
            },
        }
        for d in days
    ]
    written = [r for r in per_day if r["day"] > 0] or per_day
    return {
        "per_day": per_day,
        "median_over_days_with_writes": {
            path: round(statistics.median(r[path] for r in written), 2) for path in PATHS
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--turns-per-day", type=int, default=150)
    parser.add_argument("--per-turn", type=int, default=3, help="episodes per extraction")
    parser.add_argument("--others-per-day", type=int, default=2000)
    parser.add_argument("--group-size", type=int, default=50)
    parser.add_argument("--archived-days", type=float, default=7)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cache", default="~/.cache/wonder/bench")
    parser.add_argument("--workdir", default=None, help="where the two copies live (temp)")
    parser.add_argument("--keep", action="store_true", help="keep the copies afterwards")
    args = parser.parse_args(argv)
    np.seterr(all="ignore")
    print(json.dumps(run(args), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
