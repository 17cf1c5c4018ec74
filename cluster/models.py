"""The chat models adapter: which ``ChatModel`` serves a profile (the memory side is in
``cluster.memory_access``: a conversation actor, which only calls models, does not import it)."""

from __future__ import annotations

import asyncio

from core.domain import ModelProfile
from core.egress import model_egress
from core.errors import InvalidInput, NotFound
from core.library_policy import TEST_DOUBLES_OFF
from core.llm.openai_http import ApiKey, no_key
from core.llm.protocol import ChatModel
from core.secret_vault import SecretVault
from core.settings import Settings
from serving import llm_client, models


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
