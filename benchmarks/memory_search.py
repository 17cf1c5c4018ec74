"""Memory search at scale: several index/query designs on one table, in one run.

    .venv/bin/python benchmarks/memory_search.py            # 100k and 1M rows
    .venv/bin/python benchmarks/memory_search.py --quick    # 100k rows, fewer designs

A LanceDB table (local directory) of N memories spread over 1,000 agents; one agent (the target)
owns ``--agent-share`` of them (1 %: 10k of 1M), another a tenth of that (1k: a small agent).
Vectors are synthetic 384-d "embeddings" whose neighbourhood profile matches real
all-MiniLM-L6-v2 embeddings (``Synthetic``); contents, metadata, types and consolidated rows look
like the product's. The dataset and each design's index are built once and cached under
``--cache`` (default ``~/.cache/wonder/bench``; 1M rows: ~1.6 GB per index variant).

Each design is the product's search (``MemoryService.search(k=10)``, vector mode, query vector
precomputed: no embedding in the loop) under a ``VectorTuning``, on an index built the way the
compact job builds it (``MemoryTable.ensure_indexes`` then ``optimize()``), except ``before``: the
index and query this change replaced (IVF_SQ given ``num_partitions=√rows``, which ``optimize()``
merges down to ~31 partitions at 1M; 50 probes, refine 2, every column of the 40-row pool read).
The default design holds the agent's vectors and rows in this process (``VectorTuning()``:
resident vectors, ``core.memory.resident_cache``); every other design is the index path
(``resident_mib=0``), what an agent too large to hold gets.
Designs are timed interleaved, query by query, so machine load falls on all alike. recall@10:
the design's 10 nearest (``MemoryOps.nearest``; ``before``: its own query) against an exact numpy
top-10 over the agent's searchable rows; ranked recall@10: the search's ranked hits against the
exact ranking (``w_rel * relevance + w_sig * significance`` over all of the agent's rows).
Then the resident vectors' own costs (``resident_costs``): the cold load of the agent, the version
check, and a search right after one commit of another connection, on a shallow clone of the 1M
table and on a moto S3 server (``--s3-rows``).

Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.ids import new_id
from core.memory.embedding import DEFAULT_DIM, Vector
from core.memory.filters import MemoryFilter
from core.memory.lance import DATA_COLUMNS, MemoryTable, memory_schema, row_to_memory
from core.memory.objects import LocalObjectStore, ObjectStore
from core.memory.operations import MemoryOps
from core.memory.ranking import Candidate, rank, relevance_from_cosine_distance
from core.memory.records import Memory, RankWeights
from core.memory.service import MemoryService, SearchRequest
from core.memory.tuning import VectorTuning

TARGET = "agent-target"
SMALL = "agent-5"  # ~1/10 of the target's rows
WARMUP = 10
OTHER_AGENTS = 1000
# Synthetic "embeddings" with the neighbourhood profile of real ones: a common direction, 32 topics
# of 16 subtopics each, Gaussian noise. Calibrated against 5,800 all-MiniLM-L6-v2 embeddings of
# the standard library's docstring paragraphs (mean cosine of a held-out query's 1st / 10th /
# 40th / 100th neighbour 0.59 / 0.44 / 0.37 / 0.32, median 0.08): these give 0.57 / 0.48 / 0.38 /
# 0.34, median 0.05. (The earlier generator, 256 centres + noise 0.35, gave 0.20 / 0.16 / - /
# 0.12, median 0.00: almost uniform on the sphere, where no ANN index beats a full scan.)
TOPICS = 32
SUBTOPICS = 16
COMMON = 0.4
SUBTOPIC_WEIGHT = 0.8
NOISE = 0.065
WRITE_BATCH = 50_000


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)


@dataclass
class Synthetic:
    """Unit vectors around topic and subtopic centres fixed by the seed (see ``TOPICS``)."""

    rng: np.random.Generator
    common: np.ndarray
    topics: np.ndarray
    subtopics: np.ndarray

    @classmethod
    def make(cls, seed: int = 7, dim: int = DEFAULT_DIM) -> Synthetic:
        rng = np.random.default_rng(seed)
        topics = unit(rng.standard_normal((TOPICS, dim)))
        subtopics = unit(rng.standard_normal((TOPICS * SUBTOPICS, dim)))
        common = unit(rng.standard_normal((1, dim)))
        return cls(rng, common, topics, subtopics)

    def with_seed(self, seed: int) -> Synthetic:
        """The same centres, another stream of points (queries that are not stored rows)."""
        return Synthetic(np.random.default_rng(seed), self.common, self.topics, self.subtopics)

    def points(self, n: int) -> np.ndarray:
        picks = self.rng.integers(0, TOPICS * SUBTOPICS, n)
        noise = self.rng.standard_normal((n, self.topics.shape[1]))
        rows = (
            COMMON * self.common
            + self.topics[picks // SUBTOPICS]
            + SUBTOPIC_WEIGHT * self.subtopics[picks]
            + NOISE * noise
        )
        return unit(rows).astype(np.float32)


TYPES = ("episode", "fact", "episode", "note", "decision")
CONSOLIDATED_EVERY = 5  # one memory in five is an episode folded into a summary: searches skip it


def content_of(i: int) -> str:
    """A memory-sized text (~250 characters), distinct per row."""
    return (
        f"Memory {i}: the user mentioned project {i % 97} while we discussed the deployment plan, "
        f"asked for a written summary before the review on day {i % 28}, and prefers short "
        f"answers with concrete numbers and links to the runbooks we keep for on-call "
        f"week {i % 52}."
    )


def batch_table(
    start: int, vectors: np.ndarray, agents: Sequence[str], sig: np.ndarray, dim: int
) -> pa.Table:
    n = len(agents)
    now = datetime.now(UTC)
    rows = range(start, start + n)
    return pa.table(
        {
            "id": [f"mem_{i:012d}" for i in rows],
            "agent_id": list(agents),
            "type": [TYPES[i % len(TYPES)] for i in rows],
            "content": [content_of(i) for i in rows],
            "content_ref": pa.nulls(n, pa.string()),
            "significance": pa.array(sig, pa.float32()),
            "metadata": [
                json.dumps(
                    {
                        "source": {
                            "conversation_id": f"conv_{i % 5003:08d}",
                            "turn_id": f"turn_{i:012d}",
                        }
                    },
                    separators=(",", ":"),
                )
                for i in rows
            ],
            "subject": pa.nulls(n, pa.string()),
            "embedding_model": ["synthetic"] * n,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
            "created_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "updated_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "consolidated_into": [
                f"mem_summary_{i // 100:08d}" if i % CONSOLIDATED_EVERY == 3 else None for i in rows
            ],
        },
        schema=memory_schema(dim),
    )


@dataclass
class Agent:
    """One agent's searchable memories (not consolidated): what exact search ranks."""

    name: str
    ids: list[str]
    vectors: np.ndarray
    significance: np.ndarray


def agent_of(i: int, target_every: int) -> str:
    return TARGET if i % target_every == 0 else f"agent-{i % OTHER_AGENTS}"


def cached_dataset(cache: Path, rows: int, share: float) -> Path:
    """The raw table (scalar indexes, no vector index) for ``rows``/``share``, built once."""
    root = cache / f"memories-{rows}-share{share}-v2"
    cache.mkdir(parents=True, exist_ok=True)
    if (root / "done").exists():
        say(f"dataset {rows:,} rows: cached at {root}")
        return root
    shutil.rmtree(root, ignore_errors=True)
    say(f"dataset {rows:,} rows: building at {root} (once)")
    table = MemoryTable(str(root / "lance"), DEFAULT_DIM)
    data = Synthetic.make()
    target_every = max(1, round(1 / share))
    started = time.perf_counter()
    for start in range(0, rows, WRITE_BATCH):
        n = min(WRITE_BATCH, rows - start)
        agents = [agent_of(start + i, target_every) for i in range(n)]
        sig = data.rng.random(n).astype(np.float32)
        table.table.add(batch_table(start, data.points(n), agents, sig, DEFAULT_DIM))
        say(f"  wrote {start + n:,}/{rows:,} rows")
    table.ensure_indexes(vector_index_min_rows=rows + 1)  # scalar and FTS indexes only
    table.table.optimize(cleanup_older_than=timedelta(0))
    say(f"  built in {time.perf_counter() - started:.1f}s")
    (root / "done").write_text(json.dumps({"rows": rows, "share": share}))
    return root


def load_agent(table: MemoryTable, agent: str) -> Agent:
    """Every searchable memory of ``agent`` with its vector (flat read: the ground truth)."""
    rows = (
        table.table.search()
        .where(MemoryFilter(agent).sql())
        .select(["id", "vector", "significance"])
        .to_arrow()
    )
    vectors = rows.column("vector").combine_chunks().flatten().to_numpy()
    return Agent(
        agent,
        rows.column("id").to_pylist(),
        vectors.reshape(rows.num_rows, -1).astype(np.float32),
        rows.column("significance").to_numpy().astype(np.float32),
    )


@dataclass
class Precomputed:
    """An ``Embedder`` whose queries are names of precomputed vectors (no model in the loop)."""

    vectors: dict[str, Vector]

    @property
    def model_name(self) -> str:
        return "synthetic"

    @property
    def dim(self) -> int:
        return DEFAULT_DIM

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [self.vectors[t] for t in texts]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------- index variants


def cached_variant(dataset: Path, name: str, build: Callable[[MemoryTable], None]) -> Path:
    """A copy of the dataset with one vector index (``build``), then ``optimize()`` as the
    compact job runs it; built once."""
    root = dataset.parent / f"{dataset.name}-{name}"
    if (root / "done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    say(f"index variant {name}: building at {root} (once)")
    started = time.perf_counter()
    shutil.copytree(dataset / "lance", root / "lance")
    table = MemoryTable(str(root / "lance"), DEFAULT_DIM)
    build(table)
    table.table.optimize(cleanup_older_than=timedelta(0))
    partitions = ivf_partitions(table)
    say(f"  built in {time.perf_counter() - started:.1f}s: {partitions} partitions")
    (root / "done").write_text(json.dumps({"partitions": partitions}))
    return root


def ivf_partitions(table: MemoryTable) -> int:
    import lance

    stats = lance.dataset(table.dataset_uri).stats.index_stats("vector_idx")
    return sum(int(index["num_partitions"]) for index in stats["indices"])


def product_index(tuning: VectorTuning) -> Callable[[MemoryTable], None]:
    def build(table: MemoryTable) -> None:
        table.tuning = tuning
        table.ensure_indexes()

    return build


def legacy_index(table: MemoryTable) -> None:
    """The index before this change: ``num_partitions=√rows`` (``optimize()`` merges them)."""
    from lancedb.index import IvfSq

    partitions = max(1, min(4096, int(table.table.count_rows() ** 0.5)))
    table.table.create_index(
        "vector", config=IvfSq(distance_type="cosine", num_partitions=partitions)
    )


def shard_table(dataset: Path, shards: int) -> Path:
    """A table per agent shard: the target's shard of ``shards`` (its rows and 1/shards of the
    other agents'), small enough to need no vector index."""
    root = dataset.parent / f"{dataset.name}-shard{shards}"
    if (root / "done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    say(f"shard table 1/{shards}: building at {root} (once)")
    source = MemoryTable(str(dataset / "lance"), DEFAULT_DIM).table
    others = [f"agent-{i}" for i in range(0, OTHER_AGENTS, shards)]
    where = "agent_id IN (" + ", ".join(f"'{a}'" for a in [TARGET, *others]) + ")"
    rows = source.search().where(where).select([*DATA_COLUMNS, "vector"]).to_arrow()
    table = MemoryTable(str(root / "lance"), DEFAULT_DIM)
    table.table.add(rows.select(memory_schema(DEFAULT_DIM).names).cast(memory_schema(DEFAULT_DIM)))
    table.ensure_indexes()
    table.table.optimize(cleanup_older_than=timedelta(0))
    (root / "done").write_text(json.dumps({"rows": rows.num_rows}))
    return root


# ---------------------------------------------------------------------------- designs


@dataclass
class Design:
    """One way to search: an index variant and the product's tuning (or the old query)."""

    name: str
    variant: str
    tuning: VectorTuning = field(default_factory=VectorTuning)
    agent: str = TARGET
    legacy: bool = False
    latencies: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)
    ranked_recalls: list[float] = field(default_factory=list)
    searcher: Any = None

    def summary(self) -> dict[str, Any]:
        return {
            "p50_ms": round(statistics.median(self.latencies), 2),
            "p99_ms": round(percentile(self.latencies, 0.99), 2),
            "recall_at_10": round(float(np.mean(self.recalls)), 4),
            "ranked_recall_at_10": round(float(np.mean(self.ranked_recalls)), 4),
            "agent": self.agent,
            "variant": self.variant,
        }


INDEX_ONLY = 0  # flat_max_rows: always through the vector index
FLAT_ALWAYS = 10**9
INDEX_PATH = "IVF_SQ √rows/partition, 20 probes, refine 1 (index path)"


def designs_for(rows: int, quick: bool, hnsw: bool = False) -> list[Design]:
    sq = "ivf_sq"
    index = VectorTuning(resident_mib=0)  # the index path: what an agent too large to hold gets

    def indexed(**options: Any) -> VectorTuning:
        return VectorTuning(flat_max_rows=INDEX_ONLY, resident_mib=0, **options)

    designs = [
        Design(
            "before: IVF_SQ num_partitions, 50 probes, refine 2, all columns", "legacy", legacy=True
        ),
        Design("resident vectors, exact top-40 in numpy (default)", sq, VectorTuning()),
        Design(INDEX_PATH, sq, index),
        Design("IVF_SQ, 10 probes", sq, indexed(nprobes=10)),
        Design("IVF_SQ, 40 probes", sq, indexed(nprobes=40)),
        Design("IVF_SQ, 20 probes, refine 2", sq, indexed(refine_factor=2)),
        Design(
            "flat: exact scan of the agent's rows",
            sq,
            VectorTuning(flat_max_rows=FLAT_ALWAYS, resident_mib=0),
        ),
        Design("small agent: resident vectors (default)", sq, VectorTuning(), agent=SMALL),
        Design("small agent: IVF_SQ, probes for ~100 of its rows", sq, indexed(), agent=SMALL),
        Design("small agent: flat (index path)", sq, index, agent=SMALL),
    ]
    if not quick:
        designs += [
            Design(
                "IVF_PQ 48 bytes/vector, 20 probes, refine 1", "ivf_pq", indexed(index="ivf_pq")
            ),
            Design(
                "IVF_PQ, 20 probes, refine 4", "ivf_pq", indexed(index="ivf_pq", refine_factor=4)
            ),
            Design(
                "table per agent shard (1/64), flat",
                "shard64",
                VectorTuning(flat_max_rows=FLAT_ALWAYS, resident_mib=0),
            ),
        ]
    if hnsw:  # its index build at 1M did not finish in 45 min on the 2-core machine
        designs.append(
            Design(
                "IVF_HNSW_SQ 10k rows/partition, 5 probes",
                "ivf_hnsw_sq",
                indexed(index="ivf_hnsw_sq", partition_rows=10_000, nprobes=5),
            )
        )
    return designs


def variant_path(dataset: Path, design: Design) -> Path:
    match design.variant:
        case "legacy":
            return cached_variant(dataset, "legacy", legacy_index)
        case "shard64":
            return shard_table(dataset, 64)
        case _:
            tuning = VectorTuning(
                index=design.tuning.index, partition_rows=design.tuning.partition_rows
            )
            key = f"{tuning.index}-p{tuning.partition_rows or 'sqrt'}"
            return cached_variant(dataset, key, product_index(tuning))


def legacy_searcher(table: MemoryTable, agent: str) -> Callable[[list[float], int], Any]:
    """The search before this change (old ``MemoryOps.vector_search`` + ranking), for k hits;
    ``k=0``: the 10 nearest ids (recall)."""
    nprobes = max(20, max(1, min(4096, int(table.table.count_rows() ** 0.5))) // 20)
    where = MemoryFilter(agent).sql()

    def search(vector: list[float], k: int) -> Any:
        limit = max(4 * k, 32) if k else 10
        rows = (
            table.table.search(vector, vector_column_name="vector")
            .distance_type("cosine")
            .where(where, prefilter=True)
            .nprobes(nprobes)
            .refine_factor(2)
            .select([*DATA_COLUMNS, "_distance"])
            .limit(limit)
            .to_list()
        )
        found = {row["id"]: (row_to_memory(row), float(row["_distance"])) for row in rows}
        if not k:
            return list(found)
        candidates = [
            Candidate(i, relevance_from_cosine_distance(d), m.significance)
            for i, (m, d) in found.items()
        ]
        return [found[r.memory_id][0] for r in rank(candidates, k)]

    return search


@dataclass
class Truth:
    """An agent's searchable rows: exact nearest and exact ranking for a query."""

    agent: Agent

    def nearest(self, q: np.ndarray, k: int = 10) -> set[str]:
        order = np.argsort(-(self.agent.vectors @ q))[:k]
        return {self.agent.ids[i] for i in order}

    def ranked(self, q: np.ndarray, k: int = 10) -> set[str]:
        weights = RankWeights()
        relevance = np.clip(self.agent.vectors @ q, 0.0, 1.0)
        score = weights.relevance * relevance + weights.significance * self.agent.significance
        return {self.agent.ids[i] for i in np.argsort(-score)[:k]}


@dataclass
class Stages:
    """Where the index path's time goes, timed in the same interleaved loop: a trivial
    filtered LanceDB query (one row's id: the per-query floor), ``MemoryOps.nearest`` alone (the
    pool), ``MemoryOps.take`` alone (the winners' rows), and an exact top-40 in numpy over the
    agent's vectors held in memory (not in the product: what a per-process vector cache would
    cost before its ``take``)."""

    ops: MemoryOps
    agent: Agent
    times: dict[str, list[float]] = field(default_factory=dict)

    def run(self, q: np.ndarray) -> None:
        where = MemoryFilter(self.agent.name)
        table = self.ops.table.table
        steps: dict[str, Callable[[], object]] = {
            "lancedb_floor_one_row": lambda: (
                table.search().where(where.sql()).select(["id"]).limit(1).to_arrow()
            ),
            "nearest_pool": lambda: self.ops.nearest(where, q.tolist(), 40),
            "numpy_exact_pool_in_memory": lambda: np.argpartition(-(self.agent.vectors @ q), 40)[
                :40
            ],
        }
        winners = self.ops.nearest(where, q.tolist(), 10)
        steps["take_winners"] = lambda: self.ops.take(self.agent.name, winners)
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            self.times.setdefault(name, []).append((time.perf_counter() - started) * 1000)

    def summary(self) -> dict[str, float]:
        return {f"{name}_p50_ms": round(statistics.median(t), 2) for name, t in self.times.items()}


def run_designs(dataset: Path, designs: list[Design], queries: int) -> dict[str, float]:
    """Times every design (interleaved) and returns the index path's stage breakdown."""
    vectors = Synthetic.make().with_seed(11).points(queries + WARMUP)
    embedder = Precomputed({f"q{i}": v.tolist() for i, v in enumerate(vectors)})
    tables: dict[Path, MemoryTable] = {}
    truths: dict[str, Truth] = {}
    for design in designs:
        path = variant_path(dataset, design)
        if path not in tables:
            opened = MemoryTable(str(path / "lance"), DEFAULT_DIM)
            if not design.legacy:
                opened.ensure_indexes()  # scalar indexes the product added since it was built
            tables[path] = opened
        table = copy.copy(tables[path])  # one connection (one index cache) per variant
        table.tuning = design.tuning
        if design.agent not in truths:
            truths[design.agent] = Truth(load_agent(table, design.agent))
        if design.legacy:
            design.searcher = legacy_searcher(table, design.agent)
        else:
            ops = MemoryOps(table, LocalObjectStore(dataset / "objects"))
            design.searcher = MemoryService(ops, embedder)
    say(f"  {len(designs)} designs, {queries} queries each (+{WARMUP} warm-up), interleaved")

    async def one(design: Design, i: int) -> list[str]:
        if design.legacy:
            hits = await asyncio.to_thread(design.searcher, vectors[i].tolist(), 10)
            return [m.id for m in hits]
        request = SearchRequest(f"q{i}", k=10)
        return [h.memory.id for h in await design.searcher.search(design.agent, request)]

    async def timed() -> None:
        for i in range(queries + WARMUP):
            for j in range(len(designs)):  # rotate the order: no design always runs first
                design = designs[(i + j) % len(designs)]
                started = time.perf_counter()
                hits = await one(design, i)
                elapsed = (time.perf_counter() - started) * 1000
                if i >= WARMUP:
                    design.latencies.append(elapsed)
                    truth = truths[design.agent].ranked(vectors[i])
                    design.ranked_recalls.append(len(truth & set(hits)) / 10)
            if i >= WARMUP:
                stages.run(vectors[i])

    index_path = next(d for d in designs if d.name == INDEX_PATH)
    stages = Stages(index_path.searcher.ops, truths[TARGET].agent)
    asyncio.run(timed())
    measure_recalls(designs, truths, vectors[WARMUP:])
    return stages.summary()


def measure_recalls(designs: list[Design], truths: dict[str, Truth], vectors: np.ndarray) -> None:
    """Each design's 10 nearest against the exact 10 nearest, per query."""
    for design in designs:
        for q in vectors:
            if design.legacy:
                found = set(design.searcher(q.tolist(), 0))
            else:
                where = MemoryFilter(design.agent)
                found = {n.memory_id for n in design.searcher.ops.nearest(where, q.tolist(), 10)}
            design.recalls.append(len(truths[design.agent].nearest(q) & found) / 10)


# ---------------------------------------------------------------------------- resident costs


def new_memory(agent: str, i: int) -> Memory:
    now = datetime.now(UTC)
    return Memory(
        id=new_id("mem"),
        agent_id=agent,
        type="note",
        content=content_of(i),
        significance=0.5,
        created_at=now,
        updated_at=now,
    )


def timed_ms(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return (time.perf_counter() - started) * 1000


def resident_costs(
    uri: str, endpoint: str | None, objects: ObjectStore, rounds: int, cold_loads: int = 3
) -> dict[str, Any]:
    """What resident vectors cost besides the search itself, on the table at ``uri``: the first
    load of the target agent (a fresh cache each time), the version check alone, and a search
    right after one commit of another connection (an append by another agent, an append, an
    update and a delete of the target's), against a search with nothing committed since, and the
    index path's search, interleaved."""
    points = Synthetic.make().with_seed(23).points(rounds + 1)
    where = MemoryFilter(TARGET)

    def searcher(tuning: VectorTuning) -> MemoryOps:
        table = MemoryTable(uri, DEFAULT_DIM, endpoint_url=endpoint, tuning=tuning)
        return MemoryOps(table, objects)

    def cold_load() -> float:
        fresh = searcher(VectorTuning())
        fresh.agent_rows(TARGET)  # the row count is cached apart: not part of the load
        return timed_ms(lambda: fresh.nearest(where, points[0].tolist(), 40))

    cold = [cold_load() for _ in range(cold_loads)]
    writer = searcher(VectorTuning(resident_mib=0))
    reader = searcher(VectorTuning())
    index = searcher(VectorTuning(resident_mib=0))
    embedder = Precomputed({f"q{i}": v.tolist() for i, v in enumerate(points)})
    service, index_service = MemoryService(reader, embedder), MemoryService(index, embedder)
    times: dict[str, list[float]] = {}

    async def search(name: str, i: int, through: MemoryService = service) -> None:
        started = time.perf_counter()
        await through.search(TARGET, SearchRequest(f"q{i}", k=10))
        times.setdefault(name, []).append((time.perf_counter() - started) * 1000)

    async def rounds_of_writes() -> None:
        await search("warm-up", 0)  # loads the agent
        await search("warm-up", 0, index_service)
        for i in range(1, rounds + 1):
            vector = points[i].tolist()
            times.setdefault("version_check", []).append(timed_ms(reader.resident.latest))
            await search("search_unchanged", i)
            await search("index_path_search", i, index_service)
            writer.insert([(new_memory(f"agent-{i % OTHER_AGENTS}", i), vector)])
            await search("search_after_append_other_agent", i)
            mine = new_memory(TARGET, i)
            writer.insert([(mine, vector)])
            await search("search_after_append", i)
            changed = mine.model_copy(update={"significance": 0.9, "updated_at": datetime.now(UTC)})
            writer.replace([(changed, vector)])
            await search("search_after_update", i)
            writer.delete(TARGET, mine.id)
            await search("search_after_delete", i)

    asyncio.run(rounds_of_writes())
    times.pop("warm-up")
    held = reader.resident.held_bytes
    return {
        "cold_load_ms": [round(t, 1) for t in cold],
        "agent_rows": reader.agent_rows(TARGET),
        "held_mib": round(held / 2**20, 1),
        "reloads_during_writes": reader.resident.loads - 1,
        **{f"{name}_p50_ms": round(statistics.median(t), 2) for name, t in times.items()},
        **{f"{name}_p99_ms": round(percentile(t, 0.99), 2) for name, t in times.items()},
    }


def local_resident_costs(variant: Path, rounds: int) -> dict[str, Any]:
    """``resident_costs`` on a shallow clone of the index variant (writes leave it intact)."""
    import lance

    root = Path(tempfile.mkdtemp(prefix="wonder-bench-resident-"))
    try:
        source = lance.dataset(str(variant / "lance" / "memories.lance"))
        source.shallow_clone(str(root / "memories.lance"), source.version)
        return resident_costs(str(root), None, LocalObjectStore(root / "objects"), rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def s3_resident_costs(rows: int, rounds: int) -> dict[str, Any]:
    """``resident_costs`` on a moto S3 server (loopback: a real S3's LIST costs more), on a
    table of ``rows`` rows of which the target owns 10 %."""
    from cluster.local_services import start_s3
    from core.memory.objects import open_object_store

    server = start_s3()
    try:
        uri = f"s3://{server.make_bucket()}"
        table = MemoryTable(f"{uri}/lance", DEFAULT_DIM, endpoint_url=server.endpoint_url)
        data = Synthetic.make()
        agents = [agent_of(i, 10) for i in range(rows)]
        sig = data.rng.random(rows).astype(np.float32)
        table.table.add(batch_table(0, data.points(rows), agents, sig, DEFAULT_DIM))
        table.ensure_indexes()
        objects = open_object_store(f"{uri}/objects", server.endpoint_url)
        return resident_costs(f"{uri}/lance", server.endpoint_url, objects, rounds)
    finally:
        server.stop()


def search_benchmark(
    cache: Path,
    rows: int,
    share: float,
    queries: int,
    quick: bool,
    hnsw: bool,
    resident_rounds: int,
) -> Any:
    say(f"search: {rows:,} memories, target agent {share:.1%} of them")
    dataset = cached_dataset(cache, rows, share)
    designs = designs_for(rows, quick, hnsw)
    load = os.getloadavg()[0]
    stages = run_designs(dataset, designs, queries)
    results = {d.name: d.summary() for d in designs}
    load_between = os.getloadavg()[0]
    resident = local_resident_costs(variant_path(dataset, designs[1]), resident_rounds)
    say(f"  resident vectors' costs (load {load_between:.1f}): {resident}")
    say(f"  index path's stages (p50 ms): {stages}")
    for name, figures in results.items():
        say(
            f"  {name:64s} p50 {figures['p50_ms']:7.2f} p99 {figures['p99_ms']:7.2f} ms  "
            f"recall@10 {figures['recall_at_10']:.3f} ranked {figures['ranked_recall_at_10']:.3f}"
        )
    return {
        "rows": rows,
        "designs": results,
        "index_path_stages": stages,
        "resident_costs": resident,
        "load_avg_1m_before_resident_costs": round(load_between, 1),
        "load_avg_1m_before": round(load, 1),
        "load_avg_1m_after": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k rows only, fewer designs")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--agent-share", type=float, default=0.01)
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path.home() / ".cache" / "wonder" / "bench",
        help="where the datasets and index variants are kept between runs",
    )
    parser.add_argument(
        "--hnsw", action="store_true", help="add IVF_HNSW_SQ (its 1M index build takes long)"
    )
    parser.add_argument(
        "--rows",
        type=int,
        action="append",
        help="table sizes to run (repeatable; default 100,000 and 1,000,000)",
    )
    parser.add_argument(
        "--rounds", type=int, default=30, help="write/search rounds of the resident costs"
    )
    parser.add_argument(
        "--s3-rows",
        type=int,
        default=20_000,
        help="rows of the moto S3 table for the resident costs there (0: skip)",
    )
    args = parser.parse_args(argv)
    queries = 50 if args.quick else args.queries
    sizes = [100_000] if args.quick else (args.rows or [100_000, 1_000_000])
    result: dict[str, Any] = {
        "vectors": "synthetic, neighbourhood profile of all-MiniLM-L6-v2, 384-d",
        "queries": queries,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 1),
    }
    for rows in sizes:
        key = f"{rows // 1000}k" if rows < 1_000_000 else f"{rows // 1_000_000}m"
        result[key] = search_benchmark(
            args.cache, rows, args.agent_share, queries, args.quick, args.hnsw, args.rounds
        )
    if args.s3_rows:
        load = os.getloadavg()[0]
        result["s3_moto"] = s3_resident_costs(args.s3_rows, args.rounds)
        result["s3_moto"]["load_avg_1m_before"] = round(load, 1)
        say(f"resident vectors' costs on moto S3 (load {load:.1f}): {result['s3_moto']}")
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
