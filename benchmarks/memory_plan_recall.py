"""Recall of the memory search plans for an agent whose upkeep folded most of its rows.

    .venv/bin/python benchmarks/memory_plan_recall.py            # 100k rows, 1,000 partitions
    .venv/bin/python benchmarks/memory_plan_recall.py --rows 20000 --partitions 200

A synthetic LanceDB table (clustered unit vectors, IVF_SQ with BITMAP indexes on the filter columns,
as the compact job builds them) where one agent owns ``--agent-rows`` rows, of which only
``--searchable`` are not folded into a summary (``consolidated_into IS NULL``). Queries near that
agent's searchable rows run with the prefilter the product uses, through each plan
``core.memory.tuning.VectorTuning`` can choose from:

- ``probes_for_all_rows``: IVF probes sized for every row of the agent (the folded ones too);
- ``probes_for_searchable``: IVF probes sized for the rows the prefilter can keep;
- ``flat``: an exact search over the prefiltered rows (what an agent with at most
  ``WONDER_MEMORY_FLAT_MAX_ROWS`` searchable rows gets).

Printed per plan: recall@10 against an exact search in numpy, results returned (a prefiltered IVF
search can come back short), and p50 latency. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from core.memory.tuning import VectorTuning

WHERE = "agent_id = 'agent' AND consolidated_into IS NULL"


def say(message: str) -> None:
    print(f"[plan_recall {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build(args: argparse.Namespace, root: str) -> tuple[Any, np.ndarray, np.ndarray]:
    """The table, every row's vector, and the row numbers the prefilter keeps."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(200, args.dim)).astype("float32")
    vectors = centers[rng.integers(0, 200, args.rows)]
    vectors = vectors + 0.5 * rng.normal(size=vectors.shape).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    mine = rng.choice(args.rows, args.agent_rows, replace=False)
    agents = np.full(args.rows, "other", dtype=object)
    agents[mine] = "agent"
    folded = np.zeros(args.rows, dtype=bool)
    folded[mine[args.searchable :]] = True
    table = pa.table(
        {
            "id": pa.array(np.arange(args.rows)),
            "agent_id": pa.array(agents.tolist(), pa.string()),
            "consolidated_into": pa.array(
                [("summary" if f else None) for f in folded], pa.string()
            ),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), args.dim),
        }
    )
    say(f"writing {args.rows:,} rows; indexing ({args.partitions} partitions)")
    db = lancedb.connect(root)
    lance_table = db.create_table("memories", table)
    lance_table.create_scalar_index("agent_id", index_type="BITMAP")
    lance_table.create_scalar_index("consolidated_into", index_type="BITMAP")
    lance_table.create_index(
        metric="cosine",
        vector_column_name="vector",
        index_type="IVF_SQ",
        num_partitions=args.partitions,
    )
    return lance_table, vectors, np.nonzero((agents == "agent") & ~folded)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--agent-rows", type=int, default=12_000)
    parser.add_argument("--searchable", type=int, default=700)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    tuning = VectorTuning(partition_rows=max(1, args.rows // args.partitions))
    plans: dict[str, int | None] = {
        "probes_for_all_rows": tuning.probes(args.rows, args.agent_rows),
        "probes_for_searchable": tuning.probes(args.rows, args.searchable),
        "flat": None,
    }
    root = tempfile.mkdtemp(prefix="wonder-plan-recall-")
    try:
        table, vectors, reachable = build(args, root)
        rng = np.random.default_rng(1)
        queries = vectors[rng.choice(reachable, args.queries)]
        queries = queries + 0.3 * rng.normal(size=queries.shape).astype("float32")
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        results: dict[str, Any] = {}
        for name, probes in plans.items():
            recall, returned, seconds = [], [], []
            for query in queries:
                exact = set(reachable[np.argsort(-(vectors[reachable] @ query))[:10]].tolist())
                search = (
                    table.search(query.tolist(), vector_column_name="vector")
                    .distance_type("cosine")
                    .where(WHERE, prefilter=True)
                )
                search = search.bypass_vector_index() if probes is None else search.nprobes(probes)
                started = time.perf_counter()
                found = set(search.limit(10).select(["id"]).to_arrow().column("id").to_pylist())
                seconds.append(time.perf_counter() - started)
                recall.append(len(found & exact) / 10)
                returned.append(len(found))
            results[name] = {
                "probes": probes,
                "recall_at_10": round(statistics.fmean(recall), 3),
                "returned_of_10": round(statistics.fmean(returned), 2),
                "p50_ms": round(statistics.median(seconds) * 1000, 2),
            }
            say(f"{name}: {results[name]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "rows": args.rows,
                "agent_rows": args.agent_rows,
                "searchable": args.searchable,
                "plans": results,
            }
        )
    )


if __name__ == "__main__":
    main()
