"""Which ``ChatModel`` answers for a model profile.

``vllm`` → the local vLLM Serve deployment (through a deployment handle, streaming, no HTTP hop);
``openai`` → any OpenAI-compatible URL; ``scripted`` → a ScriptedModel built from the profile's
script, a fresh one per turn (tests and benchmarks only: the product never answers with a scripted
model unless a profile asks for one).
"""

from __future__ import annotations

from core.domain import ModelProfile
from core.errors import NotFound
from core.llm.openai_http import OpenAIHttpModel
from core.llm.protocol import ChatModel
from core.llm.scripted import ScriptedModel, echo_last_user


def chat_model_for(profile: ModelProfile) -> ChatModel:
    """The model that serves ``profile``."""
    if profile.provider == "openai":
        if not profile.base_url:
            raise NotFound(f"model profile {profile.id} has provider openai but no base_url")
        return OpenAIHttpModel.from_env(profile.base_url, profile.api_key_env)
    if profile.provider == "scripted":
        if profile.script:
            return ScriptedModel.from_profile_script(profile.script)
        if profile.model == "echo":
            return ScriptedModel([echo_last_user])
        raise NotFound(f"scripted profile {profile.id} has no script")
    from serving.llm_client import VllmHandleModel  # the local model (issue: local model)

    return VllmHandleModel(model=profile.model)
