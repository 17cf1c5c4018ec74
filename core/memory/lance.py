"""The LanceDB table that holds every agent's memories (one table, prefiltered by ``agent_id``).

Concurrency: LanceDB commits are optimistic; appends never conflict with each other, and updates
go through ``merge_insert`` keyed on ``id`` so a concurrent append is never overwritten. Connections
use ``read_consistency_interval=0`` so a process sees other processes' commits on its next read.
Never ``fork`` a process after it has used LanceDB (its runtime threads do not survive a fork):
start workers with ``spawn``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from core.errors import InvalidInput, NotFound
from core.memory.records import Memory

TABLE_NAME = "memories"
# Below this many rows a flat (exact) prefiltered scan is as fast as an index and always exact.
VECTOR_INDEX_MIN_ROWS = 50_000
# IVF probes: at least this many, and 1/20 of the partitions (√rows). Measured on 1M synthetic
# clustered rows, one agent of 10k prefiltered: 20 of 1000 partitions gave recall@10 0.77,
# 50 gave 1.0 (benchmarks/memory_search.py; docs/memory.md).
MIN_NPROBES = 20
NPROBES_SHARE = 20
NPROBES_CACHE_S = 60.0

DATA_COLUMNS = [
    "id",
    "agent_id",
    "type",
    "content",
    "content_ref",
    "significance",
    "metadata",
    "subject",
    "embedding_model",
    "created_at",
    "updated_at",
    "consolidated_into",
]

_TS = pa.timestamp("us", tz="UTC")


def memory_schema(dim: int) -> pa.Schema:
    """The Arrow schema of the memories table for ``dim``-dimensional embeddings."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("agent_id", pa.string(), nullable=False),
            pa.field("type", pa.string(), nullable=False),
            pa.field("content", pa.string(), nullable=False),
            pa.field("content_ref", pa.string()),
            pa.field("significance", pa.float32(), nullable=False),
            pa.field("metadata", pa.string(), nullable=False),
            pa.field("subject", pa.string()),
            pa.field("embedding_model", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("created_at", _TS, nullable=False),
            pa.field("updated_at", _TS, nullable=False),
            pa.field("consolidated_into", pa.string()),
        ]
    )


def sql_literal(value: str) -> str:
    """A SQL string literal (LanceDB filters are DataFusion SQL)."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(sql_literal(v) for v in values)})"


def storage_options_for(uri: str, endpoint_url: str | None) -> dict[str, str]:
    """LanceDB object-store options: an S3-compatible endpoint when one is configured."""
    if not uri.startswith("s3://") or not endpoint_url:
        return {}
    return {
        "aws_endpoint": endpoint_url,
        "allow_http": "true" if endpoint_url.startswith("http://") else "false",
        "aws_region": os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("AWS_REGION")
        or "us-east-1",
    }


def ivf_partitions(rows: int) -> int:
    """IVF partitions for a table of ``rows``: about √rows, at most 4096."""
    return max(1, min(4096, int(rows**0.5)))


def memory_to_row(memory: Memory, vector: Sequence[float]) -> dict[str, Any]:
    row = memory.model_dump(mode="python")
    row["metadata"] = json.dumps(memory.metadata, separators=(",", ":"), sort_keys=True)
    row["vector"] = [float(x) for x in vector]
    return row


def row_to_memory(row: dict[str, Any]) -> Memory:
    values: dict[str, Any] = {name: row.get(name) for name in DATA_COLUMNS}
    values["metadata"] = json.loads(values["metadata"] or "{}")
    values["significance"] = round(float(values["significance"] or 0.0), 6)
    for name in ("created_at", "updated_at"):
        stamp = values[name]
        if isinstance(stamp, datetime) and stamp.tzinfo is None:
            values[name] = stamp.replace(tzinfo=UTC)
    return Memory.model_validate(values)


def rows_table(rows: Iterable[dict[str, Any]], dim: int) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=memory_schema(dim))


class MemoryTable:
    """An open connection to the memories table (create on first use, check the dimension)."""

    def __init__(
        self,
        uri: str,
        dim: int,
        *,
        endpoint_url: str | None = None,
        table_name: str = TABLE_NAME,
    ) -> None:
        import lancedb

        self.uri = uri
        self.dim = dim
        self.table_name = table_name
        self.storage_options = storage_options_for(uri, endpoint_url)
        self.db = lancedb.connect(
            uri,
            storage_options=self.storage_options or None,
            read_consistency_interval=timedelta(0),
        )
        self.table = self._open_or_create()
        self._check_dim()
        self._nprobes = (MIN_NPROBES, -NPROBES_CACHE_S)

    def nprobes(self) -> int:
        """IVF partitions to probe for the table's current size (re-read once a minute)."""
        value, at = self._nprobes
        if time.monotonic() - at > NPROBES_CACHE_S:
            partitions = ivf_partitions(int(self.table.count_rows()))
            value = max(MIN_NPROBES, partitions // NPROBES_SHARE)
            self._nprobes = (value, time.monotonic())
        return value

    @classmethod
    def open_existing(
        cls, uri: str, *, endpoint_url: str | None = None, table_name: str = TABLE_NAME
    ) -> MemoryTable:
        """The table as it is (its vector dimension read from its schema); jobs use this."""
        import lancedb

        options = storage_options_for(uri, endpoint_url)
        db = lancedb.connect(uri, storage_options=options or None)
        try:
            table = db.open_table(table_name)
        except ValueError as exc:
            raise NotFound(f"no memories table at {uri}") from exc
        dim = int(table.schema.field("vector").type.list_size)
        return cls(uri, dim, endpoint_url=endpoint_url, table_name=table_name)

    def _open_or_create(self) -> Any:
        try:
            return self.db.create_table(
                self.table_name, schema=memory_schema(self.dim), exist_ok=True
            )
        except (OSError, ValueError, RuntimeError):
            # Two processes racing to create it: the loser opens the winner's table.
            return self.db.open_table(self.table_name)

    def _check_dim(self) -> None:
        field = self.table.schema.field("vector")
        existing = field.type.list_size
        if existing != self.dim:
            raise InvalidInput(
                f"memories table at {self.uri} has {existing}-dimensional vectors; the embedder "
                f"gives {self.dim} (re-embed into a new table to change models)"
            )

    @property
    def dataset_uri(self) -> str:
        """The Lance dataset path (what Ray Data's ``read_lance``/``write_lance`` take)."""
        return f"{self.uri.rstrip('/')}/{self.table_name}.lance"

    def index_names(self) -> dict[str, str]:
        """Indexed column → index type."""
        return {
            ",".join(index.columns): str(index.index_type) for index in self.table.list_indices()
        }

    def ensure_indexes(self, vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS) -> list[str]:
        """Create the missing indexes; returns what it created. Idempotent.

        Scalar indexes (BITMAP on ``agent_id`` and ``type``, BTREE on ``id``) and the full-text
        index on ``content`` always; the IVF_SQ vector index once the table has
        ``vector_index_min_rows`` rows (below that a prefiltered flat scan is fast and exact).
        """
        from lancedb.index import FTS, Bitmap, BTree, IvfSq

        existing = self.index_names()
        wanted: list[tuple[str, Any]] = [
            ("agent_id", Bitmap()),
            ("type", Bitmap()),
            ("id", BTree()),
            ("content", FTS(with_position=False)),
        ]
        rows = self.table.count_rows()
        if rows >= vector_index_min_rows:
            partitions = ivf_partitions(rows)
            wanted.append(("vector", IvfSq(distance_type="cosine", num_partitions=partitions)))
        created: list[str] = []
        for column, config in wanted:
            if column in existing:
                continue
            try:
                self.table.create_index(column, config=config, replace=False)
            except (OSError, RuntimeError, ValueError):
                if column not in self.index_names():  # not a lost race with another process
                    raise
                continue
            created.append(column)
        return created
