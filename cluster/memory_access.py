"""Memory for the processes that use it (executor workers, the gateway, batch jobs): which
embedder memories use, and this process's ``MemoryService`` (one per store locations and
embedder). Apart from ``cluster.models`` so that a process that only calls models (a conversation
actor) never imports the memory stack (LanceDB, pyarrow)."""

from __future__ import annotations

import asyncio
import threading
import time

from cluster.metrics import ray_metrics
from core.memory import open_memory_service
from core.memory.embedding import Embedder
from core.memory.records import MemoryHit
from core.memory.service import MemoryService, SearchRequest
from core.settings import Settings
from serving.embedder import get_embedder


class ServedEmbedders:
    """``Embedders``: the Embedder deployment when it is up, else the model in-process."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env

    async def embedder(self) -> Embedder:
        return await get_embedder(self.settings_env)


_services: dict[tuple[str, ...], MemoryService] = {}
_services_lock = threading.Lock()  # tasks run on fresh event loops: no asyncio.Lock here


class ProcessMemory:
    """``MemoryAccess``: this process's memory service for the stores ``settings`` name."""

    def __init__(self, settings: Settings, embedders: ServedEmbedders) -> None:
        self.settings = settings
        self.embedders = embedders

    async def service(self) -> MemoryService:
        embedder = await self.embedders.embedder()
        settings = self.settings
        key = (
            settings.resolved_lance_uri,
            settings.resolved_object_uri,
            settings.s3_endpoint_url or "",
            embedder.model_name,
            type(embedder).__name__,
        )

        def opened() -> MemoryService:
            with _services_lock:
                if key not in _services:
                    opened = open_memory_service(settings, embedder, settings.memory_tuning)
                    _services[key] = MeasuredMemoryService(opened.ops, opened.embedder)
                return _services[key]

        return await asyncio.to_thread(opened)


class MeasuredMemoryService(MemoryService):
    """The memory service with ``memory.search`` latency reported to the process's metrics."""

    async def search(self, agent_id: str, request: SearchRequest) -> list[MemoryHit]:
        started = time.perf_counter()
        try:
            return await super().search(agent_id, request)
        finally:
            ray_metrics().memory_search(time.perf_counter() - started)
