"""Memory benchmark: search latency and recall for one agent in a large table; embed job throughput.

    .venv/bin/python benchmarks/memory_search.py            # 100k and 1M rows (a few minutes)
    .venv/bin/python benchmarks/memory_search.py --quick    # 100k rows, small embed run

Search: a LanceDB table (local directory) of N memories with *synthetic clustered* 384-d unit
vectors (not real embeddings: cluster centres + Gaussian noise), spread over 1,000 agents; one
agent owns ``--agent-share`` of them. The indexes are the product's (``MemoryTable.ensure_indexes``:
BITMAP agent_id/type, BTREE id, FTS, IVF_SQ), the query is the product's (``MemoryService.search``:
prefilter by agent, candidate pool, ranking). Latency is ``MemoryService.search(k=10)`` with the
query vector precomputed (no embedding); recall@10 compares the ANN top-10 by distance
(``MemoryOps.vector_search``) with an exact numpy top-10 over the agent's vectors.

Embed: the same texts embedded by plain ``SentenceTransformer.encode`` (model loaded first) and by
the embed job (``jobs.embed.run_embed``: Ray Data, an actor pool sized to this machine, merge back
into LanceDB) on a local Ray this script starts; ``embed_job_ratio`` = job rows/s ÷ plain rows/s,
job time end to end (actor start and model load included: a fixed ~10 s on 2 cores).

Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.memory.embedding import DEFAULT_DIM, Vector
from core.memory.lance import MemoryTable, memory_schema
from core.memory.objects import LocalObjectStore
from core.memory.operations import MemoryFilter, MemoryOps
from core.memory.service import MemoryService, SearchRequest

TARGET = "agent-target"
OTHER_AGENTS = 1000
CLUSTERS = 256
NOISE = 0.35
WRITE_BATCH = 50_000


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)


@dataclass
class Synthetic:
    """Clustered unit vectors: ``centres`` fixed by the seed, points = centre + noise."""

    rng: np.random.Generator
    centres: np.ndarray

    @classmethod
    def make(cls, seed: int = 7, dim: int = DEFAULT_DIM) -> Synthetic:
        rng = np.random.default_rng(seed)
        return cls(rng, unit(rng.standard_normal((CLUSTERS, dim)).astype(np.float32)))

    def points(self, n: int) -> np.ndarray:
        picks = self.rng.integers(0, CLUSTERS, n)
        noise = self.rng.standard_normal((n, self.centres.shape[1])).astype(np.float32)
        return unit(self.centres[picks] + NOISE * noise).astype(np.float32)


def batch_table(
    start: int, vectors: np.ndarray, agents: Sequence[str], sig: np.ndarray, dim: int
) -> pa.Table:
    n = len(agents)
    now = datetime.now(UTC)
    ids = [f"mem_{start + i:012d}" for i in range(n)]
    return pa.table(
        {
            "id": ids,
            "agent_id": list(agents),
            "type": ["episode"] * n,
            "content": [f"synthetic memory {start + i}" for i in range(n)],
            "content_ref": pa.nulls(n, pa.string()),
            "significance": pa.array(sig, pa.float32()),
            "metadata": ["{}"] * n,
            "subject": pa.nulls(n, pa.string()),
            "embedding_model": ["synthetic"] * n,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
            "created_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "updated_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "consolidated_into": pa.nulls(n, pa.string()),
        },
        schema=memory_schema(dim),
    )


def build_table(root: Path, rows: int, share: float, data: Synthetic) -> tuple[MemoryOps, Any]:
    """Write ``rows`` memories; returns the ops and the target agent's (ids, vectors)."""
    ops = MemoryOps(MemoryTable(str(root / "lance"), DEFAULT_DIM), LocalObjectStore(root / "obj"))
    target_every = max(1, round(1 / share))
    target_ids: list[str] = []
    target_vectors: list[np.ndarray] = []
    started = time.perf_counter()
    for start in range(0, rows, WRITE_BATCH):
        n = min(WRITE_BATCH, rows - start)
        vectors = data.points(n)
        agents = [
            TARGET if (start + i) % target_every == 0 else f"agent-{(start + i) % OTHER_AGENTS}"
            for i in range(n)
        ]
        sig = data.rng.random(n).astype(np.float32)
        ops.table.table.add(batch_table(start, vectors, agents, sig, DEFAULT_DIM))
        mine = [i for i, a in enumerate(agents) if a == TARGET]
        target_ids.extend(f"mem_{start + i:012d}" for i in mine)
        target_vectors.append(vectors[mine])
        say(f"  wrote {start + n:,}/{rows:,} rows")
    say(f"  {rows:,} rows in {time.perf_counter() - started:.1f}s; building indexes")
    started = time.perf_counter()
    created = ops.table.ensure_indexes()
    ops.table.table.optimize()
    say(f"  indexes {created} in {time.perf_counter() - started:.1f}s")
    return ops, (target_ids, np.concatenate(target_vectors))


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


def measure_search(ops: MemoryOps, target: Any, queries: int, data: Synthetic) -> dict[str, float]:
    ids, vectors = target
    query_vectors = data.points(queries + 10)
    embedder = Precomputed({f"q{i}": v.tolist() for i, v in enumerate(query_vectors)})
    service = MemoryService(ops, embedder)
    where = MemoryFilter(TARGET)

    async def timed() -> list[float]:
        latencies = []
        for i in range(queries + 10):
            started = time.perf_counter()
            hits = await service.search(TARGET, SearchRequest(f"q{i}", k=10))
            if i >= 10:  # warm-up excluded
                latencies.append((time.perf_counter() - started) * 1000)
            assert len(hits) == 10
        return latencies

    latencies = asyncio.run(timed())
    recalls = []
    for q in query_vectors[10:]:
        exact = {ids[i] for i in np.argsort(-(vectors @ q))[:10]}
        found = {f.memory.id for f in ops.vector_search(where, q.tolist(), 10)}
        recalls.append(len(found & exact) / 10)
    return {
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "recall_at_10": round(float(np.mean(recalls)), 4),
        "agent_rows": len(ids),
    }


def search_benchmark(rows: int, share: float, queries: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="wonder-bench-"))
    try:
        say(f"search: {rows:,} memories, target agent {share:.1%} of them")
        data = Synthetic.make()
        ops, target = build_table(root, rows, share, data)
        result = measure_search(ops, target, queries, data)
        say(f"  {result}")
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sentences(n: int) -> list[str]:
    """Memory-like texts of 30-40 words (what extraction writes: a few sentences each)."""
    subjects = ["The user", "Our team", "The customer", "My manager", "The new intern"]
    verbs = ["prefers", "asked about", "decided on", "complained about", "wants to learn"]
    objects = ["green tea", "the Q3 roadmap", "PostgreSQL", "weekly demos", "Rust", "hiking"]
    tails = [
        "because the previous approach kept failing during the quarterly review",
        "and wants a short written summary before the planning meeting on Thursday",
        "after a long discussion about costs, deadlines and who owns the follow-up work",
    ]
    return [
        f"{subjects[i % 5]} {verbs[(i // 5) % 5]} {objects[(i // 25) % 6]} {tails[i % 3]}. "
        f"This came up in conversation {i} and should be remembered when similar questions "
        f"come back later."
        for i in range(n)
    ]


def embed_benchmark(n: int) -> dict[str, float]:
    """Plain encode vs the embed job on the same ``n`` texts, in this run."""
    import ray

    from core.memory import HashingEmbedder, NewMemory, open_memory_service
    from core.memory.embedding import encode_texts, load_sentence_transformer

    texts = sentences(n)
    started = time.perf_counter()
    model = load_sentence_transformer()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    encode_texts(model, texts, batch_size=64)
    plain_s = time.perf_counter() - started
    plain_rate = n / plain_s
    say(f"embed: plain encode {n} texts in {plain_s:.1f}s ({plain_rate:.0f}/s; load {load_s:.1f}s)")

    root = Path(tempfile.mkdtemp(prefix="wonder-bench-embed-"))
    ray_tmp = tempfile.mkdtemp(prefix="wb", dir="/tmp")
    os.environ["WONDER_DATA_DIR"] = str(root)
    os.environ.pop("RAY_ADDRESS", None)
    try:

        @dataclass(frozen=True)
        class Where:
            resolved_lance_uri: str = str(root / "lance")
            resolved_object_uri: str = str(root / "objects")
            s3_endpoint_url: str | None = None

        stand_in = open_memory_service(Where(), HashingEmbedder(DEFAULT_DIM, name="stand-in"))
        memories = [NewMemory(content=t) for t in texts]
        asyncio.run(stand_in.write("agent-embed", memories, dedupe="none"))
        cpus = os.cpu_count() or 1
        ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            _temp_dir=ray_tmp,
            log_to_driver=False,
            runtime_env={"env_vars": {"WONDER_DATA_DIR": str(root)}},
        )
        from jobs.embed import EmbedOptions, run_embed

        options = EmbedOptions(cpus_per_actor=cpus, write_chunk=1024)  # one actor, all cores
        started = time.perf_counter()
        result = run_embed(options)
        job_s = time.perf_counter() - started
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result["written"] == n, result
    job_rate = n / job_s
    ratio = job_rate / plain_rate
    say(f"embed: job {n} texts in {job_s:.1f}s ({job_rate:.0f}/s), ratio {ratio:.2f}")
    return {
        "plain_rows_per_s": round(plain_rate, 1),
        "plain_model_load_s": round(load_s, 2),
        "job_rows_per_s": round(job_rate, 1),
        "job_seconds": round(job_s, 2),
        "rows": n,
        "ratio": round(job_rate / plain_rate, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k rows only, 300 texts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--agent-share", type=float, default=0.01)
    parser.add_argument("--embed-texts", type=int, default=2000)
    args = parser.parse_args(argv)
    queries = 50 if args.quick else args.queries
    texts = 300 if args.quick else args.embed_texts
    load_before = os.getloadavg()[0]
    small = search_benchmark(100_000, args.agent_share, queries)
    large = None if args.quick else search_benchmark(1_000_000, args.agent_share, queries)
    embed = embed_benchmark(texts)
    result: dict[str, Any] = {
        "search_p50_ms_100k": small["p50_ms"],
        "search_p99_ms_100k": small["p99_ms"],
        "recall_at_10_100k": small["recall_at_10"],
        "agent_rows_100k": small["agent_rows"],
        "search_p50_ms_1m": large["p50_ms"] if large else None,
        "search_p99_ms_1m": large["p99_ms"] if large else None,
        "recall_at_10_1m": large["recall_at_10"] if large else None,
        "agent_rows_1m": large["agent_rows"] if large else None,
        "embed_job_ratio": embed["ratio"],
        "embed_plain_rows_per_s": embed["plain_rows_per_s"],
        "embed_job_rows_per_s": embed["job_rows_per_s"],
        "embed_rows": embed["rows"],
        "vectors": "synthetic clustered, 384-d",
        "queries": queries,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_start": round(load_before, 1),
    }
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
