"""Asking a model to think (seed 004: ``thinking`` in a turn's model config), per the way its
profile's model does it (``ModelProfile.thinking``). Pure."""

from __future__ import annotations

from core.domain import ModelProfile
from core.jsontypes import JsonObject


def thinking_body(profile: ModelProfile) -> JsonObject:
    """The request fields that ask ``profile``'s model to think (or not), per its mode."""
    config = profile.thinking_config
    if config is None or profile.thinking == "none":
        return {}
    if profile.thinking == "chat_template":
        return {"chat_template_kwargs": {"enable_thinking": config.enabled}}
    return {"reasoning_effort": config.effort or "medium"} if config.enabled else {}
