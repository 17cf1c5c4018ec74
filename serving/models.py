"""Which ``ChatModel`` answers for a model profile.

``vllm`` → the local vLLM Serve deployment (through a deployment handle, streaming, no HTTP hop);
``openai`` → any OpenAI-compatible URL; ``scripted`` → a ScriptedModel built from the profile's
script, a fresh one per turn (tests and benchmarks only: the product never answers with a scripted
model unless a profile asks for one).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.domain import ModelProfile
from core.egress import EgressPolicy
from core.errors import NotFound, PermissionDenied
from core.llm.openai_http import ApiKey, OpenAIHttpModel, no_key
from core.llm.protocol import ChatModel
from core.llm.scripted import ScriptedModel, echo_last_user


@dataclass(frozen=True)
class ProviderAccess:
    """What an ``openai`` profile's calls may use: where they may connect (the operator's
    allow-list) and how its API key is resolved at call time (``core.secret_vault``)."""

    egress: EgressPolicy
    api_key: ApiKey = no_key


def chat_model_for(profile: ModelProfile, access: ProviderAccess | None = None) -> ChatModel:
    """The model that serves ``profile`` (an ``openai`` profile needs ``access``)."""
    if profile.provider == "openai":
        if not profile.base_url:
            raise NotFound(f"model profile {profile.id} has provider openai but no base_url")
        if access is None:
            raise PermissionDenied(f"model profile {profile.id}: no egress allowed here")
        return OpenAIHttpModel(profile.base_url, access.egress, access.api_key)
    if profile.provider == "scripted":
        if profile.script:
            return ScriptedModel.from_profile_script(profile.script)
        if profile.model == "echo":
            return ScriptedModel([echo_last_user])
        raise NotFound(f"scripted profile {profile.id} has no script")
    from serving.llm_client import VllmHandleModel  # the local model (issue: local model)

    return VllmHandleModel(model=profile.model)
