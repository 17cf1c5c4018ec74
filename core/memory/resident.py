"""Resident vectors: one agent's searchable columns held in this process, searched exactly.

Pure: Arrow rows in, ids and distances out; no storage, no clock. ``core.memory.resident_cache``
loads an agent's rows from LanceDB, keeps them current and bounds the memory they take.

An ``AgentVectors`` holds, per row (a *slot*): id, unit-length float32 vector, significance,
type, consolidated flag, subject, ``created_at``, the Lance row address it was read at, and the
row's other data columns (so the winners of a search need no second read). Rows only ever append
to new slots: a row that changed is read again and appended, its old slot becomes a tombstone;
tombstones are compacted away once they outnumber the live rows. Searching is an exact cosine
top-``limit`` over every live slot with the ``MemoryFilter`` applied as a mask.

A row address is ``fragment_id << 32 | offset`` (Lance's). Fragments are immutable apart from
deletions, and their ids are never reused, so a version's fragment list tells what changed since
another (``fragment_changes``): rows of an added fragment are new (appends, the new side of an
update or of a compaction), rows of a removed fragment are gone, and a fragment whose deletion file
changed lost some rows (a delete, the old side of an update).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.memory.filters import MemoryFilter
from core.memory.lance import DATA_COLUMNS, row_to_memory
from core.memory.records import Memory

ADDRESS_COLUMN = "_rowaddr"
# What a load reads per row: the data columns, the vector and the row address (with_row_address).
LOAD_COLUMNS = [*DATA_COLUMNS, "vector"]
# Per row beyond the vector and its data columns: id string, dict entry, the small arrays.
_SLOT_OVERHEAD_BYTES = 160
_FIRST_CAPACITY = 64

# A fragment's deletion state: None (no deletions) or its deletion file's path.
DeletionState = str | None


@dataclass(frozen=True, slots=True)
class ResidentHit:
    """One of the nearest rows: what ranking needs, and the row address it was read at."""

    memory_id: str
    significance: float
    distance: float
    address: int


@dataclass(frozen=True, slots=True)
class FragmentChanges:
    """How a table's fragments differ between two versions."""

    added: frozenset[int]
    removed: frozenset[int]
    changed: frozenset[int]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def fragment_changes(
    before: Mapping[int, DeletionState], after: Mapping[int, DeletionState]
) -> FragmentChanges:
    """Fragments added, removed, and kept with another deletion state, from ``before`` to
    ``after`` (fragment id → deletion state at each version)."""
    return FragmentChanges(
        added=frozenset(after.keys() - before.keys()),
        removed=frozenset(before.keys() - after.keys()),
        changed=frozenset(f for f in after.keys() & before.keys() if after[f] != before[f]),
    )


def fragment_of(addresses: np.ndarray) -> np.ndarray:
    """The fragment id of each row address."""
    return (addresses >> np.uint64(32)).astype(np.int64)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero: relevance 0 to every query)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: np.ndarray = (vectors / np.where(norms == 0.0, 1.0, norms)).astype(np.float32)
    return scaled


def top_by_similarity(similarities: np.ndarray, mask: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` highest similarities among ``mask``, best first."""
    candidates = np.flatnonzero(mask)
    if limit <= 0 or candidates.size == 0:
        return candidates[:0]
    scores = similarities[candidates]
    if candidates.size > limit:
        part = np.argpartition(-scores, limit - 1)[:limit]
        candidates, scores = candidates[part], scores[part]
    return candidates[np.argsort(-scores, kind="stable")]


def _micros(stamp: datetime) -> int:
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class AgentVectors:
    """One agent's rows, searchable exactly (see the module docstring)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._used = 0  # slots used, live or not
        self._live_count = 0
        self._vectors = np.empty((0, dim), np.float32)
        self._significance = np.empty(0, np.float32)
        self._type_code = np.empty(0, np.int32)
        self._consolidated = np.empty(0, np.bool_)
        self._created = np.empty(0, np.int64)
        self._address = np.empty(0, np.uint64)
        self._live = np.empty(0, np.bool_)
        self._ids: list[str] = []
        self._subjects: list[str | None] = []
        self._slot_of: dict[str, int] = {}
        self._type_codes: dict[str, int] = {}
        self._rows: pa.Table | None = None

    @classmethod
    def from_rows(cls, dim: int, rows: pa.Table) -> AgentVectors:
        loaded = cls(dim)
        loaded.upsert(rows)
        return loaded

    # ------------------------------------------------------------------ size

    @property
    def rows(self) -> int:
        """Live rows."""
        return self._live_count

    @property
    def nbytes(self) -> int:
        """Approximately what this holds in memory."""
        arrays = (
            self._vectors,
            self._significance,
            self._type_code,
            self._consolidated,
            self._created,
            self._address,
            self._live,
        )
        held = sum(a.nbytes for a in arrays) + _SLOT_OVERHEAD_BYTES * self._used
        return held + (self._rows.nbytes if self._rows is not None else 0)

    def fragments(self) -> set[int]:
        """Fragments holding live rows."""
        live = self._address[: self._used][self._live[: self._used]]
        return {int(f) for f in np.unique(fragment_of(live))}

    # ------------------------------------------------------------------ changes

    def upsert(self, rows: pa.Table) -> None:
        """Add ``rows`` (``LOAD_COLUMNS`` + ``ADDRESS_COLUMN``); a row whose id is held already
        replaces it."""
        n = rows.num_rows
        if n == 0:
            return
        ids = [str(i) for i in rows.column("id").to_pylist()]
        for memory_id in ids:
            self._kill(self._slot_of.get(memory_id))
        self._reserve(self._used + n)
        start, end = self._used, self._used + n
        flat = rows.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        self._vectors[start:end] = unit_rows(np.asarray(flat, np.float32).reshape(n, self.dim))
        self._significance[start:end] = rows.column("significance").to_numpy(zero_copy_only=False)
        self._type_code[start:end] = [self._code(t) for t in rows.column("type").to_pylist()]
        self._consolidated[start:end] = pc.is_valid(rows.column("consolidated_into")).to_numpy(
            zero_copy_only=False
        )
        created = rows.column("created_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        self._created[start:end] = created.to_numpy(zero_copy_only=False)
        self._address[start:end] = rows.column(ADDRESS_COLUMN).to_numpy(zero_copy_only=False)
        self._live[start:end] = True
        for offset, memory_id in enumerate(ids):
            self._kill(self._slot_of.get(memory_id))  # a duplicate id within ``rows``
            self._slot_of[memory_id] = start + offset
            self._live_count += 1
        self._ids.extend(ids)
        self._subjects.extend(rows.column("subject").to_pylist())
        data = rows.select(DATA_COLUMNS)
        self._rows = data if self._rows is None else pa.concat_tables([self._rows, data])
        self._used = end
        self._compact_if_sparse()

    def drop_fragments(self, fragments: Collection[int]) -> int:
        """Forget the rows read from ``fragments``; returns how many."""
        if not fragments:
            return 0
        doomed = np.isin(fragment_of(self._address[: self._used]), list(fragments))
        return self._kill_where(doomed)

    def keep_live(self, fragments: Collection[int], live_addresses: np.ndarray) -> int:
        """Of the rows read from ``fragments``, forget those whose address is not in
        ``live_addresses`` (deleted since); returns how many."""
        if not fragments:
            return 0
        addresses = self._address[: self._used]
        in_fragments = np.isin(fragment_of(addresses), list(fragments))
        gone = in_fragments & ~np.isin(addresses, live_addresses.astype(np.uint64))
        return self._kill_where(gone)

    # ------------------------------------------------------------------ search and read

    def mask(self, where: MemoryFilter) -> np.ndarray:
        """Live slots that ``where`` admits (its agent is this one's by construction)."""
        n = self._used
        mask = self._live[:n].copy()
        if where.types:
            codes = [self._type_codes[t] for t in where.types if t in self._type_codes]
            mask &= np.isin(self._type_code[:n], codes)
        if not where.include_consolidated:
            mask &= ~self._consolidated[:n]
        if where.created_before is not None:
            mask &= self._created[:n] < _micros(where.created_before)
        if where.subject is not None:
            mask &= np.fromiter((s == where.subject for s in self._subjects), np.bool_, n)
        return mask

    def nearest(
        self, where: MemoryFilter, vector: Sequence[float], limit: int
    ) -> list[ResidentHit]:
        """The ``limit`` nearest rows ``where`` admits, by exact cosine distance, nearest first."""
        query = np.asarray(vector, np.float32)
        norm = float(np.linalg.norm(query))
        if norm > 0.0:
            query = query / norm
        similarities = self._vectors[: self._used] @ query
        best = top_by_similarity(similarities, self.mask(where), limit)
        return [
            ResidentHit(
                self._ids[slot],
                float(self._significance[slot]),
                1.0 - float(similarities[slot]),
                int(self._address[slot]),
            )
            for slot in best.tolist()
        ]

    def memories(self, memory_ids: Sequence[str]) -> dict[str, Memory]:
        """The held rows of ``memory_ids`` (ids not held are left out)."""
        slots = [self._slot_of[i] for i in memory_ids if i in self._slot_of]
        if not slots or self._rows is None:
            return {}
        rows = self._rows.take(pa.array(slots, pa.int64())).to_pylist()
        return {str(row["id"]): row_to_memory(row) for row in rows}

    def vectors(self, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """The held (unit-length) vectors of ``memory_ids``."""
        return {
            i: self._vectors[self._slot_of[i]].tolist() for i in memory_ids if i in self._slot_of
        }

    # ------------------------------------------------------------------ storage

    def _code(self, memory_type: str) -> int:
        return self._type_codes.setdefault(memory_type, len(self._type_codes))

    def _kill(self, slot: int | None) -> None:
        if slot is not None and self._live[slot]:
            self._live[slot] = False
            self._live_count -= 1
            del self._slot_of[self._ids[slot]]

    def _kill_where(self, doomed: np.ndarray) -> int:
        slots = np.flatnonzero(doomed & self._live[: self._used])
        for slot in slots.tolist():
            self._kill(slot)
        self._compact_if_sparse()
        return int(slots.size)

    def _reserve(self, needed: int) -> None:
        capacity = self._live.shape[0]
        if needed <= capacity:
            return
        # Grow by an eighth: a held agent mostly gains a row at a time, and doubling a 10k-row
        # agent's 15 MB of vectors for one row would hold twice what it needs.
        grown = max(needed, capacity + capacity // 8, _FIRST_CAPACITY)
        self._resize(grown)

    def _resize(self, capacity: int) -> None:
        def grow(array: np.ndarray) -> np.ndarray:
            bigger = np.zeros((capacity, *array.shape[1:]), array.dtype)
            bigger[: self._used] = array[: self._used]
            return bigger

        self._vectors = grow(self._vectors)
        self._significance = grow(self._significance)
        self._type_code = grow(self._type_code)
        self._consolidated = grow(self._consolidated)
        self._created = grow(self._created)
        self._address = grow(self._address)
        self._live = grow(self._live)

    def _compact_if_sparse(self) -> None:
        dead = self._used - self._live_count
        if dead <= max(self._live_count, _FIRST_CAPACITY):
            return
        keep = np.flatnonzero(self._live[: self._used])
        for name in (
            "_vectors",
            "_significance",
            "_type_code",
            "_consolidated",
            "_created",
            "_address",
            "_live",
        ):
            setattr(self, name, getattr(self, name)[keep].copy())
        self._ids = [self._ids[i] for i in keep.tolist()]
        self._subjects = [self._subjects[i] for i in keep.tolist()]
        self._slot_of = {memory_id: slot for slot, memory_id in enumerate(self._ids)}
        if self._rows is not None:
            self._rows = self._rows.take(pa.array(keep, pa.int64())).combine_chunks()
        self._used = self._live_count = int(keep.size)
