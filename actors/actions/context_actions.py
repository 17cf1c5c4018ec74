"""``context.get`` / ``context.set``: per-conversation working state (seed 003's context)."""

from __future__ import annotations

from typing import Any

from actors.actions import ActionContext, JsonObject, action
from core.errors import InvalidInput


def _conversation(ctx: ActionContext) -> str:
    if not ctx.conversation_id:
        raise InvalidInput("context actions need a conversation")
    return ctx.conversation_id


@action("context.get")
async def context_get(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    key = str(params.get("key") or data.get("key") or "")
    if not key:
        raise InvalidInput("context.get needs a key")
    return {"key": key, "value": ctx.services.store.context.get(_conversation(ctx), key)}


@action("context.set")
async def context_set(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    key = str(params.get("key") or data.get("key") or "")
    if not key:
        raise InvalidInput("context.set needs a key")
    value = params["value"] if "value" in params else data.get("value")
    ctx.services.store.context.set(_conversation(ctx), key, value)
    return {"key": key, "value": value}
