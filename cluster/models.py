"""Adapters for models and memory: which ``ChatModel`` serves a profile, which embedder memories
use, and this process's ``MemoryService`` (one per store locations and embedder)."""

from __future__ import annotations

import asyncio
import threading
import time

from cluster.metrics import ray_metrics
from core.domain import ModelProfile
from core.egress import model_egress
from core.errors import InvalidInput, NotFound
from core.library_policy import TEST_DOUBLES_OFF
from core.llm.openai_http import ApiKey, no_key
from core.llm.protocol import ChatModel
from core.memory import open_memory_service
from core.memory.embedding import Embedder
from core.memory.records import MemoryHit
from core.memory.service import MemoryService, SearchRequest
from core.secret_vault import SecretVault
from core.settings import Settings
from serving import llm_client, models
from serving.embedder import get_embedder


class ServedChatModels:
    """``ChatModels``: the local vLLM deployment, an OpenAI-compatible URL, or a scripted model
    (only where the operator allows test doubles: a profile stored before they were turned off
    fails here as it would at ``PUT``).

    An OpenAI-compatible URL is checked against the operator's allow-list (and its address at
    each call); its API key, a client secret, is resolved from ``vault`` in a worker thread at
    each call, for the client whose turn or task makes it."""

    def __init__(self, settings: Settings, vault: SecretVault | None = None) -> None:
        self.allow_test_doubles = settings.allow_test_doubles
        self.egress = model_egress(settings)
        self.vault = vault

    def for_profile(self, profile: ModelProfile, client_id: str | None = None) -> ChatModel:
        if profile.provider == "scripted" and not self.allow_test_doubles:
            raise InvalidInput(f"model profile {profile.id}: {TEST_DOUBLES_OFF}")
        if profile.provider != "openai":
            return models.chat_model_for(profile)
        # The URL is checked (and its address) at each call: a refusal fails that call.
        access = models.ProviderAccess(self.egress, self._api_key(profile, client_id))
        return models.chat_model_for(profile, access)

    def _api_key(self, profile: ModelProfile, client_id: str | None) -> ApiKey:
        name, vault = profile.api_key_secret, self.vault
        if name is None:
            return no_key
        where = f"model profile {profile.id}"

        async def resolve() -> str | None:
            if vault is None:
                raise NotFound(f"{where}: secrets are not available in this process")
            return await asyncio.to_thread(vault.resolve, client_id, name, where)

        return resolve

    def prewarm(self, profile: ModelProfile) -> None:
        if profile.provider == "vllm":
            llm_client.prewarm()


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
