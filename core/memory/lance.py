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
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, assert_never

import pyarrow as pa

from core.errors import InvalidInput, NotFound
from core.memory.records import Memory
from core.memory.tuning import VECTOR_INDEX_MIN_ROWS, VectorTuning

TABLE_NAME = "memories"

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
        tuning: VectorTuning | None = None,
    ) -> None:
        import lancedb

        self.uri = uri
        self.dim = dim
        self.table_name = table_name
        self.tuning = tuning or VectorTuning()
        self.storage_options = storage_options_for(uri, endpoint_url)
        self.db = lancedb.connect(
            uri,
            storage_options=self.storage_options or None,
            read_consistency_interval=timedelta(0),
        )
        self.table = self._open_or_create()
        self._check_dim()

    @classmethod
    def open_existing(
        cls,
        uri: str,
        *,
        endpoint_url: str | None = None,
        table_name: str = TABLE_NAME,
        tuning: VectorTuning | None = None,
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
        return cls(uri, dim, endpoint_url=endpoint_url, table_name=table_name, tuning=tuning)

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

        Scalar indexes (BITMAP on ``agent_id``, ``type`` and ``consolidated_into``, BTREE on
        ``id``) and the full-text
        index on ``content`` always; the vector index (``self.tuning``) once the table has
        ``vector_index_min_rows`` rows (below that a prefiltered flat scan is fast and exact).
        """
        from lancedb.index import FTS, Bitmap, BTree

        existing = self.index_names()
        wanted: list[tuple[str, Any]] = [
            ("agent_id", Bitmap()),
            ("type", Bitmap()),
            # Every search prefilters ``consolidated_into IS NULL``: without an index that reads
            # the column for each of the agent's rows (~7 ms for 10k rows; docs/memory.md).
            ("consolidated_into", Bitmap()),
            ("id", BTree()),
            ("content", FTS(with_position=False)),
        ]
        rows = self.table.count_rows()
        if rows >= vector_index_min_rows:
            wanted.append(("vector", self.vector_index_config(rows)))
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

    def rebuild_vector_index(self) -> None:
        """Replace the vector index with one built per ``self.tuning`` (another index kind or
        partition size; or an index built before partitions were given as a size)."""
        config = self.vector_index_config(self.table.count_rows())
        self.table.create_index("vector", config=config, replace=True)

    def vector_index_config(self, rows: int) -> Any:
        """The LanceDB vector index for a table of ``rows`` rows, per ``self.tuning``."""
        from lancedb.index import HnswSq, IvfPq, IvfSq

        size = self.tuning.partition_rows_for(rows)
        match self.tuning.index:
            case "ivf_sq":
                return IvfSq(distance_type="cosine", target_partition_size=size)
            case "ivf_pq":
                # 8 dimensions per sub-vector: 48 bytes per 384-d vector instead of SQ's 384.
                sub_vectors = self.dim // 8 if self.dim % 8 == 0 else None
                return IvfPq(
                    distance_type="cosine", target_partition_size=size, num_sub_vectors=sub_vectors
                )
            case "ivf_hnsw_sq":
                return HnswSq(distance_type="cosine", target_partition_size=size)
            case other:
                assert_never(other)
