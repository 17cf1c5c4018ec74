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


HISTORY_LIMIT = 200
HISTORY_SCAN = 10_000
HISTORY_CHARS = 2000


@action("conversation.history")
async def conversation_history(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """This conversation's earlier messages, beyond the window the model sees: the newest
    ``limit`` (default 20, at most 200) before ``before_seq``, optionally only those containing
    ``query`` (case-insensitive), oldest first."""
    query = str(params.get("query") or data.get("query") or "").strip().lower()
    try:
        limit = int(params.get("limit") or data.get("limit") or 20)
        before = int(params.get("before_seq") or data.get("before_seq") or 0)
    except (TypeError, ValueError):
        raise InvalidInput("conversation.history: limit and before_seq are integers") from None
    if not 1 <= limit <= HISTORY_LIMIT:
        raise InvalidInput(f"conversation.history: limit is 1 to {HISTORY_LIMIT}")
    found = [
        message
        for message in ctx.services.store.messages.list(_conversation(ctx), limit=HISTORY_SCAN)
        if (not before or message.seq < before) and (not query or query in message.content.lower())
    ][-limit:]
    return {
        "messages": [
            {
                "seq": m.seq,
                "turn_id": m.turn_id,
                "role": m.role.value,
                "author": m.author,
                "content": m.content[:HISTORY_CHARS],
            }
            for m in found
        ],
        "more": len(found) == limit,
    }
