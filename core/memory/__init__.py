"""Agent memory (ARCHITECTURE.md §3, §7): LanceDB rows + object-store contents, no Ray.

``open_memory_service`` wires the pieces for one process: the LanceDB table, the object store and
an embedder. Callers in Ray processes cache the result (``actors.actions.memory_actions``).
"""

from __future__ import annotations

from typing import Protocol

from core.memory.embedding import Embedder, HashingEmbedder, SentenceTransformerEmbedder
from core.memory.lance import MemoryTable
from core.memory.objects import LocalObjectStore, ObjectStore, S3ObjectStore, open_object_store
from core.memory.operations import MemoryFilter, MemoryOps
from core.memory.records import (
    INLINE_LIMIT_BYTES,
    Memory,
    MemoryHit,
    MemoryType,
    NewMemory,
    RankWeights,
    SearchMode,
    WriteOutcome,
)
from core.memory.service import MemoryService, SearchRequest

__all__ = [
    "INLINE_LIMIT_BYTES",
    "Embedder",
    "HashingEmbedder",
    "LocalObjectStore",
    "Memory",
    "MemoryFilter",
    "MemoryHit",
    "MemoryLocations",
    "MemoryOps",
    "MemoryService",
    "MemoryTable",
    "MemoryType",
    "NewMemory",
    "ObjectStore",
    "RankWeights",
    "S3ObjectStore",
    "SearchMode",
    "SearchRequest",
    "SentenceTransformerEmbedder",
    "WriteOutcome",
    "open_existing_memory_ops",
    "open_memory_ops",
    "open_memory_service",
    "open_object_store",
]


class MemoryLocations(Protocol):
    """Where memories live (``cluster.config.Settings`` satisfies this)."""

    @property
    def resolved_lance_uri(self) -> str: ...

    @property
    def resolved_object_uri(self) -> str: ...

    @property
    def s3_endpoint_url(self) -> str | None: ...


def open_memory_ops(locations: MemoryLocations, dim: int) -> MemoryOps:
    """The memories table and object store named by ``locations``."""
    endpoint = locations.s3_endpoint_url
    table = MemoryTable(locations.resolved_lance_uri, dim, endpoint_url=endpoint)
    return MemoryOps(table, open_object_store(locations.resolved_object_uri, endpoint))


def open_existing_memory_ops(locations: MemoryLocations) -> MemoryOps:
    """The memories table as it is (dimension from its schema) and the object store: for jobs."""
    endpoint = locations.s3_endpoint_url
    table = MemoryTable.open_existing(locations.resolved_lance_uri, endpoint_url=endpoint)
    return MemoryOps(table, open_object_store(locations.resolved_object_uri, endpoint))


def open_memory_service(locations: MemoryLocations, embedder: Embedder) -> MemoryService:
    return MemoryService(open_memory_ops(locations, embedder.dim), embedder)
