"""How memories are searched: agents' resident vectors and how the table's vector index is built
and probed (``WONDER_MEMORY_*`` settings).

An agent of at most ``resident_max_rows`` memories is searched exactly over its vectors held in
the searching process (``core.memory.resident_cache``, within ``resident_mib``); the index below
serves larger agents and processes with no room.

Measured on 1M synthetic memories, one agent of 10k prefiltered (``benchmarks/memory_search.py``,
docs/internals/memory.md "Benchmark"): IVF_SQ with ~√rows rows per partition, 20 probes and the pool
re-scored on full vectors keeps recall@10 ≥ 0.95 against exact search at a fraction of a full
scan. An agent holding at most ``flat_max_rows`` memories is searched exactly (flat over its
rows): IVF probes find too few of a small agent's rows.

This module is light (no pyarrow, no LanceDB): ``core.settings`` builds a ``VectorTuning``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VectorIndexKind = Literal["ivf_sq", "ivf_pq", "ivf_hnsw_sq"]
VECTOR_INDEX_KINDS: tuple[VectorIndexKind, ...] = ("ivf_sq", "ivf_pq", "ivf_hnsw_sq")

# Below this many rows in the table a prefiltered flat scan is fast and exact: no vector index.
VECTOR_INDEX_MIN_ROWS = 50_000
MAX_PARTITION_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class VectorTuning:
    """Vector index build (the compact job) and query (every search) parameters.

    Attributes:
        index: ``ivf_sq`` (8-bit scalar quantised vectors per IVF partition, the default),
            ``ivf_pq`` (product quantised: smaller, needs ``refine_factor`` for recall) or
            ``ivf_hnsw_sq`` (an HNSW graph per partition).
        partition_rows: rows per IVF partition when the index is built; None: √rows. Given as a
            size, not a count, because LanceDB's ``optimize()`` merges the partitions of an index
            built with ``num_partitions`` down to its own target size (1,000 → 31 at 1M rows).
        nprobes: IVF partitions probed per query at least (more: better recall, slower).
        scan_rows: probe enough partitions to expect this many of the agent's own rows among
            them (``partitions * scan_rows / agent rows``, at least ``nprobes``): the prefilter
            drops every other agent's rows, so a smaller agent needs more probes.
        refine_factor: re-score ``refine_factor * limit`` candidates on their full vectors, at
            least 1: without that stage LanceDB returns IVF distances on another scale (IVF_SQ:
            about twice the cosine distance), which would skew relevance against significance.
        flat_max_rows: agents with at most this many searchable memories (not folded into a
            summary) are searched exactly, without the index (the count is cached per process for
            ``count_cache_s``).
        count_cache_s: how long a process trusts an agent's cached row count.
        resident_mib: memory a process may hold agents' vectors and rows in, searched exactly
            without LanceDB's vector index (``core.memory.resident_cache``); 0: never.
        resident_max_rows: an agent with more rows than this is searched through the index.
    """

    index: VectorIndexKind = "ivf_sq"
    partition_rows: int | None = None
    nprobes: int = 20
    scan_rows: int = 100
    refine_factor: int = 1
    flat_max_rows: int = 1_000
    count_cache_s: float = 60.0
    resident_mib: int = 256
    resident_max_rows: int = 50_000

    def plan(self, table_rows: int, searchable_rows: int) -> int | None:
        """How to search an agent with ``searchable_rows`` rows the query's prefilter can keep
        (not folded into a summary): None, exactly over them (flat); else the IVF partitions to
        probe. Rows the agent keeps only as history (folded episodes) never make it slower."""
        if searchable_rows <= self.flat_max_rows:
            return None
        return self.probes(table_rows, searchable_rows)

    def probes(self, table_rows: int, agent_rows: int) -> int:
        """IVF partitions to probe for an agent of ``agent_rows`` in a table of ``table_rows``
        (the partition count is estimated from the table's size, as the index was built)."""
        partitions = max(1, table_rows // self.partition_rows_for(table_rows))
        wanted = -(-self.scan_rows * partitions // max(1, agent_rows))  # ceiling division
        return min(partitions, max(self.nprobes, wanted))

    def partition_rows_for(self, rows: int) -> int:
        """Rows per IVF partition for a table of ``rows`` rows."""
        if self.partition_rows is not None:
            return max(1, min(MAX_PARTITION_ROWS, self.partition_rows))
        return max(1, min(MAX_PARTITION_ROWS, int(rows**0.5)))
