"""Per-turn model override (seed 004: model config can vary per turn).

A message may ask for another model profile, temperature or max tokens for the turn it starts.
The override is checked against the library when the message is posted (an unknown profile is a
``NotFound``), stored keyed by the message, applied when the turn's context is assembled, and
the profile actually used is recorded for the turn (``TurnModel``).
"""

from __future__ import annotations

from core.domain import ModelProfile
from core.errors import InvalidInput, NotFound
from core.store import Store
from core.turn_model import ModelOverride, ModelUsed


def check_override(
    store: Store,
    override: ModelOverride,
    client_id: str,
    default: ModelProfile | None = None,
) -> None:
    """``NotFound`` when the override names a profile neither the client's library nor the
    system's has; ``InvalidInput`` when it asks for thinking of a model that cannot think (the
    profile it names, else ``default``: the conversation's agent's)."""
    chosen = default
    if override.model_profile_id is not None:
        try:
            chosen = store.model_profiles.get(override.model_profile_id, client_id=client_id)
        except NotFound:
            raise NotFound(
                f"model.model_profile_id: model profile {override.model_profile_id} not found"
            ) from None
    if override.thinking is not None and override.thinking.enabled:
        if chosen is None:
            raise InvalidInput(
                "model.thinking: this conversation has no agent whose model could think; name a "
                "model_profile_id that supports thinking"
            )
        if chosen.thinking == "none":
            raise InvalidInput(
                f"model.thinking: model profile {chosen.id} ({chosen.provider} {chosen.model}) "
                "does not support thinking; use a profile whose thinking is chat_template or "
                "reasoning_effort, or leave thinking out"
            )


def overridden_profile(
    store: Store, profile: ModelProfile, override: ModelOverride, client_id: str
) -> ModelProfile:
    """The profile a turn uses: ``profile`` (the persona's) with the override applied."""
    chosen = (
        store.model_profiles.get(override.model_profile_id, client_id=client_id)
        if override.model_profile_id is not None
        else profile
    )
    changes: dict[str, object] = {}
    if override.temperature is not None:
        changes["temperature"] = override.temperature
    if override.max_tokens is not None:
        changes["max_tokens"] = override.max_tokens
    if override.thinking is not None and chosen.thinking != "none":
        changes["thinking_config"] = override.thinking
    return chosen.model_copy(update=changes)


def used(profile: ModelProfile) -> ModelUsed:
    return ModelUsed(
        model_profile_id=profile.id,
        model_profile_version=profile.version,
        provider=profile.provider,
        model=profile.model,
        temperature=profile.temperature,
        max_tokens=profile.max_tokens,
        thinking=profile.thinking_config,
    )


def turn_profile(store: Store, turn_id: str, profile: ModelProfile, client_id: str) -> ModelProfile:
    """The profile turn ``turn_id`` runs with (its message's override applied, if any, from the
    library of ``client_id``, the agent's client); records what it used on its ``TurnModel``."""
    asked = store.turn_models.for_turn(turn_id)
    if asked is None:
        return profile
    chosen = overridden_profile(store, profile, asked.override, client_id)
    store.turn_models.save(asked.model_copy(update={"turn_id": turn_id, "used": used(chosen)}))
    return chosen
