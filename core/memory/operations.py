"""``MemoryOps``: storage of memories (LanceDB rows + object-store contents), no business rules.

Every read and write names the agent, so one agent can never see or change another's memories.
Contents over ``INLINE_LIMIT_BYTES`` are put in the object store *before* the row that refers to
them is committed, and deleted *after* the row is gone, so a row never points at a missing object.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute

from core.errors import NotFound, RetryableError
from core.memory.filters import MemoryFilter
from core.memory.lance import (
    DATA_COLUMNS,
    MemoryTable,
    memory_schema,
    memory_to_row,
    row_to_memory,
    rows_table,
    sql_in,
    sql_literal,
)
from core.memory.objects import ObjectStore, object_key
from core.memory.records import INLINE_LIMIT_BYTES, Memory
from core.memory.resident_cache import ResidentCache

_TS = pa.timestamp("us", tz="UTC")

T = TypeVar("T")

_COMMIT_ATTEMPTS = 5
_COUNTS_CACHE = 100_000


@dataclass(frozen=True, slots=True)
class Found:
    """A row a search found, with its raw score (cosine distance or BM25)."""

    memory: Memory
    raw_score: float


@dataclass(frozen=True, slots=True)
class Nearest:
    """A vector search candidate before its row is read: what ranking needs."""

    memory_id: str
    significance: float
    distance: float
    row_id: int


def _with(rows: pa.Table, columns: dict[str, pa.Array]) -> pa.Table:
    """``rows`` with some columns replaced (same names, same types)."""
    for name, values in columns.items():
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, rows.schema.field(index), values)
    return rows


def _micros(stamp: datetime) -> int:
    """A timestamp as whole microseconds since the epoch (what the table stores)."""
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _is_commit_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "conflict" in text or "retryable commit" in text or "concurrent" in text


def with_commit_retries(fn: Callable[[], T], attempts: int = _COMMIT_ATTEMPTS) -> T:
    """Run a LanceDB write, retrying when another writer committed a conflicting version first."""
    for attempt in range(attempts):
        try:
            return fn()
        except (OSError, RuntimeError, ValueError) as exc:
            if not _is_commit_conflict(exc):
                raise
            if attempt == attempts - 1:
                raise RetryableError(f"memory write conflicted {attempts} times: {exc}") from exc
            time.sleep(0.02 * (2**attempt))
    raise AssertionError("unreachable")


class MemoryOps:
    """Rows in the memories table and contents in the object store."""

    def __init__(self, table: MemoryTable, objects: ObjectStore) -> None:
        self.table = table
        self.objects = objects
        self._counts: dict[str, tuple[int, float]] = {}
        tuning = table.tuning
        self.resident = ResidentCache(
            table, tuning.resident_mib * 1024 * 1024, tuning.resident_max_rows
        )

    @property
    def dim(self) -> int:
        return self.table.dim

    # ------------------------------------------------------------------ writes

    def externalise(self, memory: Memory, content: str) -> Memory:
        """``memory`` with ``content`` inline, or put in the object store when it is too large."""
        if len(content.encode()) <= INLINE_LIMIT_BYTES:
            return memory.model_copy(update={"content": content, "content_ref": None})
        key = object_key(memory.agent_id, memory.id)
        self.objects.put(key, content.encode())
        return memory.model_copy(update={"content": "", "content_ref": key})

    def insert(self, rows: Sequence[tuple[Memory, Sequence[float]]]) -> None:
        """Append memories (one commit; appends never conflict with other writers)."""
        if not rows:
            return
        data = rows_table((memory_to_row(m, v) for m, v in rows), self.dim)
        self.table.table.add(data)

    def replace(self, rows: Sequence[tuple[Memory, Sequence[float]]]) -> int:
        """Overwrite existing memories by id (one commit); returns how many matched."""
        if not rows:
            return 0
        data = rows_table((memory_to_row(m, v) for m, v in rows), self.dim)
        result = with_commit_retries(
            lambda: self.table.table.merge_insert("id").when_matched_update_all().execute(data)
        )
        return int(result.num_updated_rows)

    def insert_if_absent(self, rows: Sequence[tuple[Memory, Sequence[float]]]) -> int:
        """Insert memories whose id is not stored yet (idempotent); returns how many were new."""
        if not rows:
            return 0
        data = rows_table((memory_to_row(m, v) for m, v in rows), self.dim)
        result = with_commit_retries(
            lambda: self.table.table.merge_insert("id").when_not_matched_insert_all().execute(data)
        )
        return int(result.num_inserted_rows)

    def mark_consolidated(
        self,
        memory_ids: Sequence[str],
        into: str,
        content_refs: Sequence[str | None],
        updated_at: datetime,
    ) -> int:
        """Point memories at the one that absorbed them, in one commit (all or none). A memory
        with a content ref keeps only the reference inline; one already consolidated is left
        alone. Returns how many rows changed."""
        if not memory_ids:
            return 0
        refs = dict(zip(memory_ids, content_refs, strict=True))
        rows = self._full_rows(memory_ids)
        rows = rows.filter(pa.compute.is_null(rows.column("consolidated_into")))
        if rows.num_rows == 0:
            return 0
        ids = rows.column("id").to_pylist()
        moved = [refs[i] for i in ids]
        contents = [
            "" if ref else old
            for ref, old in zip(moved, rows.column("content").to_pylist(), strict=True)
        ]
        old_refs = rows.column("content_ref").to_pylist()
        changes = {
            "content": pa.array(contents, pa.string()),
            "content_ref": pa.array(
                [ref or old for ref, old in zip(moved, old_refs, strict=True)], pa.string()
            ),
            "consolidated_into": pa.array([into] * rows.num_rows, pa.string()),
            "updated_at": pa.array([updated_at] * rows.num_rows, _TS),
        }
        return self._merge_rows(_with(rows, changes), "target.consolidated_into IS NULL")

    def _full_rows(self, memory_ids: Sequence[str]) -> pa.Table:
        """The stored rows of ``memory_ids``, every column (read through the index on id)."""
        schema = memory_schema(self.dim)
        found = (
            self.table.table.search()
            .where(sql_in("id", memory_ids))
            .select(schema.names)
            .limit(len(memory_ids))
            .to_arrow()
        )
        return found.select(schema.names).cast(schema)

    def _merge_rows(self, rows: pa.Table, where: str) -> int:
        """Write whole rows back over their stored selves where ``where`` still holds.

        Whole rows: a merge of some columns only panics in LanceDB 0.40 once the compact job
        has built the BTREE index on ``id`` ("Incorrect number of arrays for StructArray
        fields"), and without that index every merge scans the whole table."""
        if rows.num_rows == 0:
            return 0
        result = with_commit_retries(
            lambda: (
                self.table.table.merge_insert("id")
                .when_matched_update_all(where=where)
                .execute(rows)
            )
        )
        return int(result.num_updated_rows)

    def set_vectors(
        self,
        ids: Sequence[str],
        vectors: Sequence[Sequence[float]] | pa.Array,
        model: str,
        updated_at: Sequence[datetime],
    ) -> int:
        """Store new embeddings for rows whose ``updated_at`` is unchanged (a row edited since it
        was read keeps its newer vector: the next embed run picks it up). Returns rows updated.
        ``vectors`` may be an Arrow array already (the embed job's batches: no copy to Python)."""
        if not ids:
            return 0
        vector_type = pa.list_(pa.float32(), self.dim)
        given = (
            vectors.cast(vector_type)
            if isinstance(vectors, pa.Array)
            else pa.array([[float(x) for x in v] for v in vectors], vector_type)
        )
        wanted = {
            i: (n, _micros(stamp)) for n, (i, stamp) in enumerate(zip(ids, updated_at, strict=True))
        }
        rows = self._full_rows(ids)
        stamps = [_micros(s) for s in rows.column("updated_at").to_pylist()]
        keep = [
            wanted[i][1] == stamp
            for i, stamp in zip(rows.column("id").to_pylist(), stamps, strict=True)
        ]
        rows = rows.filter(pa.array(keep, pa.bool_()))
        if rows.num_rows == 0:
            return 0
        order = pa.array([wanted[i][0] for i in rows.column("id").to_pylist()], pa.int64())
        changes = {
            "vector": given.take(order),
            "embedding_model": pa.array([model] * rows.num_rows, pa.string()),
        }
        return self._merge_rows(_with(rows, changes), "target.updated_at = source.updated_at")

    def drop_archived(self, agent_id: str, folded_before: datetime) -> int:
        """Remove the rows of ``agent_id``'s episodes folded into a summary (their content
        archived in the object store) before ``folded_before``, in one commit; the archived
        contents stay. Returns how many rows went."""
        where = (
            f"agent_id = {sql_literal(agent_id)} AND type = 'episode'"
            " AND consolidated_into IS NOT NULL AND content_ref IS NOT NULL"
            f" AND updated_at < timestamp '{folded_before.isoformat()}'"
        )
        rows = int(self.table.table.count_rows(where))
        if rows:
            with_commit_retries(lambda: self.table.table.delete(where))
        return rows

    def delete(self, agent_id: str, memory_id: str) -> Memory:
        memory = self.get(agent_id, memory_id)
        where = f"agent_id = {sql_literal(agent_id)} AND id = {sql_literal(memory_id)}"
        with_commit_retries(lambda: self.table.table.delete(where))
        if memory.content_ref:
            self.objects.delete(memory.content_ref)
        return memory

    # ------------------------------------------------------------------ reads

    def get(self, agent_id: str, memory_id: str) -> Memory:
        found = self.get_many(agent_id, [memory_id])
        if not found:
            raise NotFound(f"memory {memory_id} not found for agent {agent_id}")
        return found[0]

    def get_many(self, agent_id: str, memory_ids: Sequence[str]) -> list[Memory]:
        if not memory_ids:
            return []
        where = f"agent_id = {sql_literal(agent_id)} AND {sql_in('id', memory_ids)}"
        rows = (
            self.table.table.search()
            .where(where)
            .select(DATA_COLUMNS)
            .limit(len(memory_ids))
            .to_list()
        )
        by_id = {row["id"]: row_to_memory(row) for row in rows}
        return [by_id[i] for i in memory_ids if i in by_id]

    def vectors(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """Vectors of ``memory_ids`` (the resident ones unit length: only their direction is
        used)."""
        found = self.resident.vectors(agent_id, memory_ids)
        memory_ids = [i for i in memory_ids if i not in found]
        if not memory_ids:
            return found
        where = f"agent_id = {sql_literal(agent_id)} AND {sql_in('id', memory_ids)}"
        rows = (
            self.table.table.search()
            .where(where)
            .select(["id", "vector"])
            .limit(len(memory_ids))
            .to_list()
        )
        found.update((row["id"], list(row["vector"])) for row in rows)
        return found

    def stored_vector(self, agent_id: str, memory_id: str) -> list[float]:
        """The vector stored with a memory, as written (the resident cache holds unit vectors)."""
        where = f"agent_id = {sql_literal(agent_id)} AND id = {sql_literal(memory_id)}"
        rows = self.table.table.search().where(where).select(["vector"]).limit(1).to_list()
        if not rows:
            raise NotFound(f"memory {memory_id} not found for agent {agent_id}")
        return [float(x) for x in rows[0]["vector"]]

    def content(self, memory: Memory) -> str:
        """The full content of ``memory`` (fetched from the object store when not inline)."""
        if memory.content_ref is None:
            return memory.content
        return self.objects.get(memory.content_ref).decode()

    def recent(
        self, where: MemoryFilter, limit: int = 100, before_id: str | None = None
    ) -> list[Memory]:
        """Newest first (ids are ULIDs, so id order is creation order)."""
        from lancedb.query import ColumnOrdering

        sql = where.sql()
        if before_id is not None:
            sql += f" AND id < {sql_literal(before_id)}"
        rows = (
            self.table.table.search()
            .where(sql)
            .select(DATA_COLUMNS)
            .order_by([ColumnOrdering(column_name="id", ascending=False)])
            .limit(limit)
            .to_list()
        )
        return [row_to_memory(row) for row in rows]

    def list_all(self, where: MemoryFilter) -> list[Memory]:
        """Every memory matching ``where``, oldest first (for jobs working one agent at a time)."""
        rows = self.table.table.search().where(where.sql()).select(DATA_COLUMNS).to_list()
        return sorted((row_to_memory(row) for row in rows), key=lambda m: (m.created_at, m.id))

    def agent_ids(self, types: Sequence[str] = (), include_consolidated: bool = False) -> list[str]:
        """Agents that have memories of ``types`` (all types when empty)."""
        parts = []
        if types:
            parts.append(sql_in("type", types))
        if not include_consolidated:
            parts.append("consolidated_into IS NULL")
        query = self.table.table.search().select(["agent_id"])
        if parts:
            query = query.where(" AND ".join(parts))
        column = query.to_arrow().column("agent_id")
        return sorted(str(a) for a in pa.compute.unique(column).to_pylist())

    def count(self, where: MemoryFilter) -> int:
        return int(self.table.table.count_rows(where.sql()))

    def agent_rows(self, agent_id: str) -> int:
        """How many rows ``agent_id`` has (any state), cached per process for
        ``tuning.count_cache_s``: it only chooses how to search."""
        return self._cached_count(f"agent_id = {sql_literal(agent_id)}")

    def searchable_rows(self, where: MemoryFilter) -> int:
        """How many of the agent's rows a search with ``where`` can reach at most (its folded
        episodes left out unless it includes them), cached like ``agent_rows``: it chooses how
        to search."""
        reach = MemoryFilter(where.agent_id, include_consolidated=where.include_consolidated)
        return self._cached_count(reach.sql())

    def _cached_count(self, where: str) -> int:
        cached = self._counts.get(where)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.table.tuning.count_cache_s:
            return cached[0]
        rows = int(self.table.table.count_rows(where or None))
        if len(self._counts) >= _COUNTS_CACHE:
            self._counts.clear()
        self._counts[where] = (rows, now)
        return rows

    def nearest(self, where: MemoryFilter, vector: Sequence[float], limit: int) -> list[Nearest]:
        """The ``limit`` nearest of the agent's memories by cosine distance (prefiltered, so never
        short), without their contents: id, significance, distance and row id only.

        An agent the resident cache admits is searched exactly over its vectors held in this
        process (``core.memory.resident_cache``: current as of the table's latest version).
        Otherwise an agent with at most ``tuning.flat_max_rows`` rows the prefilter can keep is
        searched exactly (flat); a larger one through the vector index with ``tuning.probes``
        (``tuning.plan``; rows not indexed yet are always searched flat by LanceDB).
        """
        agent_rows = self.agent_rows(where.agent_id)
        resident = self.resident.nearest(where, vector, limit, agent_rows)
        if resident is not None:
            return [Nearest(h.memory_id, h.significance, h.distance, h.address) for h in resident]
        tuning = self.table.tuning
        query = (
            self.table.table.search(list(vector), vector_column_name="vector")
            .distance_type("cosine")
            .where(where.sql(), prefilter=True)
            .with_row_id(True)
        )
        probes = tuning.plan(self._cached_count(""), self.searchable_rows(where))
        if probes is None:
            query = query.bypass_vector_index()
        else:
            query = query.nprobes(probes)
            # Exact cosine distances for the pool: unrefined IVF distances are on another scale.
            query = query.refine_factor(max(1, tuning.refine_factor))
        rows = query.select(["id", "significance", "_distance"]).limit(limit).to_arrow()
        return [
            Nearest(memory_id, float(sig), float(distance), int(row_id))
            for memory_id, sig, distance, row_id in zip(
                rows.column("id").to_pylist(),
                rows.column("significance").to_pylist(),
                rows.column("_distance").to_pylist(),
                rows.column("_rowid").to_pylist(),
                strict=True,
            )
        ]

    def take(self, agent_id: str, nearest: Sequence[Nearest]) -> dict[str, Memory]:
        """The full memories of ``nearest``: held rows of a resident agent as they are, others by
        row id (one read of the winners only). A row id can change when the table is compacted
        meanwhile: rows that do not match their id and agent are read again by id."""
        held = self.resident.memories(agent_id, [n.memory_id for n in nearest])
        nearest = [n for n in nearest if n.memory_id not in held]
        if not nearest:
            return held
        rows = (
            self.table.table.take_row_ids([n.row_id for n in nearest])
            .select(DATA_COLUMNS)
            .to_list()
        )
        wanted = {n.memory_id for n in nearest}
        found = {
            row["id"]: row_to_memory(row)
            for row in rows
            if row["id"] in wanted and row["agent_id"] == agent_id
        }
        missing = [i for i in wanted if i not in found]
        found.update((m.id, m) for m in self.get_many(agent_id, missing))
        return held | found

    def vector_search(
        self, where: MemoryFilter, vector: Sequence[float], limit: int
    ) -> list[Found]:
        """Nearest by cosine distance among the agent's memories, with their rows."""
        nearest = self.nearest(where, vector, limit)
        rows = self.take(where.agent_id, nearest)
        return [Found(rows[n.memory_id], n.distance) for n in nearest if n.memory_id in rows]

    def text_search(self, where: MemoryFilter, query: str, limit: int) -> list[Found]:
        """Best BM25 matches on ``content`` among the agent's memories."""
        try:
            rows = self._text_rows(where, query, limit)
        except ValueError as exc:
            if "INVERTED index" not in str(exc):
                raise
            self._create_text_index()
            rows = self._text_rows(where, query, limit)
        return [Found(row_to_memory(row), float(row["_score"])) for row in rows]

    def _text_rows(self, where: MemoryFilter, query: str, limit: int) -> list[dict[str, Any]]:
        return list(
            self.table.table.search(query, query_type="fts", fts_columns="content")
            .where(where.sql(), prefilter=True)
            .select([*DATA_COLUMNS, "_score"])
            .limit(limit)
            .to_list()
        )

    def _create_text_index(self) -> None:
        from lancedb.index import FTS

        try:
            self.table.table.create_index("content", config=FTS(with_position=False), replace=False)
        except (OSError, RuntimeError, ValueError) as exc:
            # Another process created it first: fine, that is what we wanted.
            if "content" not in self.table.index_names():
                raise RetryableError(f"could not create the full-text index: {exc}") from exc
