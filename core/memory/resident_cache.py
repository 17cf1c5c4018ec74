"""``ResidentCache``: agents' resident vectors in this process, bounded, and never stale.

Freshness: every search first reads the table's latest version (``LanceDataset.latest_version``:
a directory listing on a local disk, a LIST on S3 — the check every LanceDB query already makes
with ``read_consistency_interval=0``). When the agent's rows were read at an older version, the
fragments of the two versions are compared (``core.memory.resident.fragment_changes``) and only
what changed is read, restricted to the agent by its BITMAP index:

- fragments added since (appends, the new rows of an update or a consolidation, a compaction's
  output): the agent's rows in them are read and replace any held row with the same id;
- fragments removed since (compacted away): their rows are forgotten;
- fragments whose deletion file changed and that hold some of the agent's rows (a delete, the old
  side of an update): the agent's live row addresses in them are read (index only, no data) and
  rows no longer live are forgotten.

So a search sees every commit made before it by any process, and a write by anyone costs the next
search one small read instead of a reload. Writes in this process take the same path (the new rows'
addresses are only known from a read). A table version that only added an index changes nothing.

Bounds: an agent with more than ``max_rows`` rows is not held (the caller uses the vector index);
the held agents together stay under ``budget_bytes``, least recently searched evicted first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from core.memory.filters import MemoryFilter
from core.memory.lance import MemoryTable, sql_literal
from core.memory.records import Memory
from core.memory.resident import (
    ADDRESS_COLUMN,
    LOAD_COLUMNS,
    AgentVectors,
    DeletionState,
    ResidentHit,
    fragment_changes,
)

# Estimated bytes per row beyond its vector (data columns, id, small arrays): admission only.
_ROW_BYTES_ESTIMATE = 600
# Fragments holding at most this many rows in all are read without the agent_id index.
_SCAN_MAX_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class TableVersion:
    """One version of the table: the dataset opened at it and its fragments' deletion states."""

    version: int
    dataset: Any
    fragments: dict[int, DeletionState]


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    vectors: AgentVectors | None = None
    at: TableVersion | None = None
    nbytes: int = 0


def deletion_state(fragment: Any) -> DeletionState:
    """The fragment's deletion file path (a new file, named by version and id, per change)."""
    deletions = fragment.deletion_file()
    return None if deletions is None else str(deletions)


class ResidentCache:
    """Resident vectors per agent for one memories table (see the module docstring)."""

    def __init__(self, table: MemoryTable, budget_bytes: int, max_rows: int) -> None:
        self.table = table
        self.budget_bytes = budget_bytes
        self.max_rows = max_rows
        self._lock = threading.Lock()  # the entries (brief)
        self._version_lock = threading.Lock()  # the version check (I/O: a LIST on S3)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._dataset: Any = None
        self._current: TableVersion | None = None
        self.loads = 0  # agents read whole (first search, or after eviction)
        self.refreshes = 0  # incremental reads after the table version moved

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0 and self.max_rows > 0

    def admits(self, agent_rows: int) -> bool:
        """Whether an agent of ``agent_rows`` rows may be held."""
        estimate = agent_rows * (4 * self.table.dim + _ROW_BYTES_ESTIMATE)
        return self.enabled and agent_rows <= self.max_rows and estimate <= self.budget_bytes

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(entry.nbytes for entry in self._entries.values())

    def held_agents(self) -> list[str]:
        """Agents held, least recently searched first."""
        with self._lock:
            return [a for a, e in self._entries.items() if e.vectors is not None]

    # ------------------------------------------------------------------ search

    def nearest(
        self, where: MemoryFilter, vector: Sequence[float], limit: int, agent_rows: int
    ) -> list[ResidentHit] | None:
        """The exact ``limit`` nearest of the agent's rows ``where`` admits, current as of the
        table's latest version; None when the agent is not held (too large for the bounds)."""
        agent = where.agent_id
        if not self.admits(agent_rows):
            self.forget(agent)
            return None
        latest = self.latest()
        with self._lock:
            entry = self._entries.setdefault(agent, _Entry())
        with entry.lock:
            vectors = self._bring_to(agent, entry, latest)
            hits = vectors.nearest(where, vector, limit)
            entry.nbytes = vectors.nbytes
            fits = vectors.rows <= self.max_rows
        if not fits:
            self.forget(agent)
        self._touch(agent)
        return hits

    def memories(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The held rows of ``memory_ids`` (as of the agent's last search); none if not held."""
        entry = self._held(agent_id)
        if entry is None:
            return {}
        with entry.lock:
            return entry.vectors.memories(memory_ids) if entry.vectors is not None else {}

    def vectors(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """The held vectors of ``memory_ids`` (unit length); none if the agent is not held."""
        entry = self._held(agent_id)
        if entry is None:
            return {}
        with entry.lock:
            return entry.vectors.vectors(memory_ids) if entry.vectors is not None else {}

    def forget(self, agent_id: str) -> None:
        with self._lock:
            self._entries.pop(agent_id, None)

    # ------------------------------------------------------------------ freshness

    def latest(self) -> TableVersion:
        """The table at its latest version (one version check; the fragment list is read again
        only when the version moved)."""
        with self._version_lock:
            if self._dataset is None:
                import lance

                self._dataset = lance.dataset(
                    self.table.dataset_uri, storage_options=self.table.storage_options or None
                )
            version = int(self._dataset.latest_version)
            current = self._current
            if current is None or current.version != version:
                dataset = self._dataset.checkout_version(version)
                fragments = {f.fragment_id: deletion_state(f) for f in dataset.get_fragments()}
                current = self._current = TableVersion(version, dataset, fragments)
            return current

    def _bring_to(self, agent: str, entry: _Entry, latest: TableVersion) -> AgentVectors:
        if entry.vectors is None or entry.at is None:
            entry.vectors = AgentVectors.from_rows(
                self.table.dim, self._read(latest, agent, None, LOAD_COLUMNS)
            )
            self.loads += 1
        elif entry.at.version < latest.version:  # another thread may have gone further
            self._refresh(agent, entry.vectors, entry.at, latest)
            self.refreshes += 1
        else:
            return entry.vectors
        entry.at = latest
        return entry.vectors

    def _refresh(
        self, agent: str, vectors: AgentVectors, held: TableVersion, latest: TableVersion
    ) -> None:
        changes = fragment_changes(held.fragments, latest.fragments)
        if changes.empty:
            return
        vectors.drop_fragments(changes.removed)
        touched = vectors.fragments() & changes.changed
        if touched:
            live = self._read(latest, agent, touched, [])
            vectors.keep_live(touched, live.column(ADDRESS_COLUMN).to_numpy(zero_copy_only=False))
        if changes.added:
            vectors.upsert(self._read(latest, agent, changes.added, LOAD_COLUMNS))

    def _read(
        self, at: TableVersion, agent: str, fragments: Collection[int] | None, columns: list[str]
    ) -> pa.Table:
        """The agent's rows at ``at`` (only in ``fragments`` unless None), with row addresses."""
        chosen = None if fragments is None else [at.dataset.get_fragment(f) for f in fragments]
        # A few new rows (appends since the last search) are filtered faster by reading their
        # agent_id than through the BITMAP index (measured: 1.5 vs 3.2 ms for one row).
        small = chosen is not None and sum(f.physical_rows for f in chosen) <= _SCAN_MAX_ROWS
        found: pa.Table = at.dataset.scanner(
            columns=[] if not small else columns,
            filter=f"agent_id = {sql_literal(agent)}",
            with_row_address=True,
            fragments=chosen,
            use_scalar_index=not small,
        ).to_table()
        if small or not columns or found.num_rows == 0:
            return found
        # Many rows (a cold load, a compaction's output): their addresses through the index, then
        # the rows by address — scattered rows of a large file come ~4x faster so than through a
        # filtered scan (1M rows, 10k of them: 240-350 vs 1,040-1,660 ms from a cold dataset).
        # ``_take_rows`` keeps the order of the addresses it is given (pylance is pinned).
        addresses = found.column(ADDRESS_COLUMN)
        rows: pa.Table = at.dataset._take_rows(addresses.to_pylist(), columns=columns)
        return rows.append_column(ADDRESS_COLUMN, addresses)

    # ------------------------------------------------------------------ bounds

    def _held(self, agent_id: str) -> _Entry | None:
        with self._lock:
            return self._entries.get(agent_id)

    def _touch(self, agent_id: str) -> None:
        """Mark ``agent_id`` most recently used; evict the least recently used over budget."""
        with self._lock:
            if agent_id in self._entries:
                self._entries.move_to_end(agent_id)
            total = sum(entry.nbytes for entry in self._entries.values())
            while total > self.budget_bytes and self._entries:
                _, evicted = self._entries.popitem(last=False)
                total -= evicted.nbytes
