"""What a message may ask of its turn's model (seed 004: model config varies per turn), and what
the turn used; the rules are in ``core.model_override``."""

from __future__ import annotations

from pydantic import Field

from core.domain import LibraryId, Model, ThinkingConfig


class ModelOverride(Model):
    model_profile_id: LibraryId | None = Field(
        None, description="Another library model profile for this turn"
    )
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1, le=32768)
    thinking: ThinkingConfig | None = Field(
        None,
        description="Thinking for this turn; refused unless the profile's model supports it",
    )


class ModelUsed(Model):
    model_profile_id: str
    model_profile_version: int
    provider: str
    model: str
    temperature: float
    max_tokens: int
    thinking: ThinkingConfig | None = None


class TurnModel(Model):
    """What a message asked for and (once its turn started) what the turn used."""

    message_id: str
    turn_id: str | None = None
    override: ModelOverride
    used: ModelUsed | None = None
