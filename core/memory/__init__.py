"""Agent memory (ARCHITECTURE.md §3, §7): LanceDB rows + object-store contents, no Ray.

``open_memory_service`` wires the pieces for one process: the LanceDB table, the object store and
an embedder. Callers in Ray processes cache the result (``actors.actions.memory_actions``).

Names are imported on first use, so importing ``core.memory.records`` (pydantic only) does not
need the optional memory stack (LanceDB, pyarrow, s3fs) installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.memory.embedding import Embedder, HashingEmbedder, SentenceTransformerEmbedder
    from core.memory.filters import MemoryFilter
    from core.memory.lance import MemoryTable
    from core.memory.objects import (
        LocalObjectStore,
        ObjectStore,
        S3ObjectStore,
        open_object_store,
    )
    from core.memory.operations import MemoryOps
    from core.memory.records import (
        INLINE_LIMIT_BYTES,
        Memory,
        MemoryEdit,
        MemoryHit,
        MemoryType,
        NewMemory,
        RankWeights,
        SearchMode,
        WriteOutcome,
    )
    from core.memory.service import MemoryService, SearchRequest
    from core.memory.tuning import VectorTuning

_LAZY = {
    "Embedder": "embedding",
    "HashingEmbedder": "embedding",
    "SentenceTransformerEmbedder": "embedding",
    "MemoryTable": "lance",
    "LocalObjectStore": "objects",
    "ObjectStore": "objects",
    "S3ObjectStore": "objects",
    "open_object_store": "objects",
    "MemoryFilter": "filters",
    "MemoryOps": "operations",
    "INLINE_LIMIT_BYTES": "records",
    "Memory": "records",
    "MemoryEdit": "records",
    "MemoryHit": "records",
    "MemoryType": "records",
    "NewMemory": "records",
    "RankWeights": "records",
    "SearchMode": "records",
    "WriteOutcome": "records",
    "MemoryService": "service",
    "SearchRequest": "service",
}

__all__ = [
    "INLINE_LIMIT_BYTES",
    "Embedder",
    "HashingEmbedder",
    "LocalObjectStore",
    "Memory",
    "MemoryEdit",
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"core.memory.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'core.memory' has no attribute {name!r}")


class MemoryLocations(Protocol):
    """Where memories live (``core.settings.Settings`` satisfies this)."""

    @property
    def resolved_lance_uri(self) -> str: ...

    @property
    def resolved_object_uri(self) -> str: ...

    @property
    def s3_endpoint_url(self) -> str | None: ...


def open_memory_ops(
    locations: MemoryLocations, dim: int, tuning: VectorTuning | None = None
) -> MemoryOps:
    """The memories table and object store named by ``locations`` (created when missing);
    ``tuning`` is how its vector index is built and searched (``Settings.memory_tuning``)."""
    from core.memory.lance import MemoryTable
    from core.memory.objects import open_object_store
    from core.memory.operations import MemoryOps

    endpoint = locations.s3_endpoint_url
    table = MemoryTable(locations.resolved_lance_uri, dim, endpoint_url=endpoint, tuning=tuning)
    return MemoryOps(table, open_object_store(locations.resolved_object_uri, endpoint))


def open_existing_memory_ops(
    locations: MemoryLocations, tuning: VectorTuning | None = None
) -> MemoryOps:
    """The memories table as it is (dimension from its schema) and the object store: for jobs."""
    from core.memory.lance import MemoryTable
    from core.memory.objects import open_object_store
    from core.memory.operations import MemoryOps

    endpoint = locations.s3_endpoint_url
    table = MemoryTable.open_existing(
        locations.resolved_lance_uri, endpoint_url=endpoint, tuning=tuning
    )
    return MemoryOps(table, open_object_store(locations.resolved_object_uri, endpoint))


def open_memory_service(
    locations: MemoryLocations, embedder: Embedder, tuning: VectorTuning | None = None
) -> MemoryService:
    from core.memory.service import MemoryService

    return MemoryService(open_memory_ops(locations, embedder.dim, tuning), embedder)
