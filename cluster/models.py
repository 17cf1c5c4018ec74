"""The chat models adapter: which ``ChatModel`` serves a profile (the memory side is in
``cluster.memory_access``: a conversation actor, which only calls models, does not import it)."""

from __future__ import annotations

from core.domain import ModelProfile
from core.errors import InvalidInput
from core.library_policy import TEST_DOUBLES_OFF
from core.llm.protocol import ChatModel
from serving import llm_client, models


class ServedChatModels:
    """``ChatModels``: the local vLLM deployment, an OpenAI-compatible URL, or a scripted model
    (only where the operator allows test doubles: a profile stored before they were turned off
    fails here as it would at ``PUT``)."""

    def __init__(self, allow_test_doubles: bool) -> None:
        self.allow_test_doubles = allow_test_doubles

    def for_profile(self, profile: ModelProfile) -> ChatModel:
        if profile.provider == "scripted" and not self.allow_test_doubles:
            raise InvalidInput(f"model profile {profile.id}: {TEST_DOUBLES_OFF}")
        return models.chat_model_for(profile)

    def prewarm(self, profile: ModelProfile) -> None:
        if profile.provider == "vllm":
            llm_client.prewarm()
