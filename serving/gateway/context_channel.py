"""A conversation's context channel (seed 003): its working state, key → JSON value, which its
tasks read and write with ``context.get`` / ``context.set``, read and written here by its client
under the conversation's own access rules (a member reads; a writer writes). Each conversation
has its own: forks and child conversations do not share it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.errors import Conflict, InvalidInput, NotFound
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context
from serving.gateway.conversations import owned_conversation
from serving.gateway.protocol import Deleted, WireModel

router = APIRouter(prefix="/v1/conversations/{conversation_id}/context", tags=["context"])

KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
ContextKey = Annotated[str, Path(pattern=KEY_PATTERN, description="An entry's key")]
MAX_VALUE_BYTES = 32 * 1024  # under the body limit (64 KiB): a value refused by name
MAX_ENTRIES = 1000


class ContextEntries(WireModel):
    conversation_id: str
    entries: dict[str, Any]


class ContextEntry(WireModel):
    key: str
    value: Any


class ContextValue(WireModel):
    value: Any = Field(description=f"Any JSON value, at most {MAX_VALUE_BYTES} bytes as JSON")


@router.get("", response_model=ContextEntries, summary="Every entry of the context channel")
def list_context(conversation_id: str, context: Context, client_id: ClientId) -> ContextEntries:
    owned_conversation(context, client_id, conversation_id)
    entries = context.store.context.entries(conversation_id, MAX_ENTRIES)
    return ContextEntries(conversation_id=conversation_id, entries=entries)


@router.get("/{key}", response_model=ContextEntry, summary="One context entry")
def get_context_entry(
    conversation_id: str, key: ContextKey, context: Context, client_id: ClientId
) -> ContextEntry:
    owned_conversation(context, client_id, conversation_id)
    entries = context.store.context.entries(conversation_id, MAX_ENTRIES)
    if key not in entries:
        raise NotFound(f"context entry {key} not found")
    return ContextEntry(key=key, value=entries[key])


@router.put("/{key}", response_model=ContextEntry, summary="Set a context entry")
async def put_context_entry(
    conversation_id: str,
    key: ContextKey,
    body: ContextValue,
    context: Context,
    client_id: ClientId,
    audit: Audit,
) -> ContextEntry:
    size = len(json.dumps(body.value, separators=(",", ":")).encode())
    if size > MAX_VALUE_BYTES:
        raise InvalidInput(f"value: {size} bytes as JSON, at most {MAX_VALUE_BYTES}")

    def write() -> ContextEntry:
        owned_conversation(context, client_id, conversation_id)
        store = context.store.context
        if store.get(conversation_id, key) is None and store.count(conversation_id) >= MAX_ENTRIES:
            raise Conflict(f"the context channel holds {MAX_ENTRIES} entries already")
        store.set(conversation_id, key, body.value)
        audit.record("conversation.context.set", f"conversations:{conversation_id}", {"key": key})
        return ContextEntry(key=key, value=body.value)

    return await run_in_threadpool(write)


@router.delete("/{key}", response_model=Deleted, summary="Remove a context entry")
async def delete_context_entry(
    conversation_id: str, key: ContextKey, context: Context, client_id: ClientId, audit: Audit
) -> Deleted:
    def remove() -> Deleted:
        owned_conversation(context, client_id, conversation_id)
        if not context.store.context.delete(conversation_id, key):
            raise NotFound(f"context entry {key} not found")
        target = f"conversations:{conversation_id}"
        audit.record("conversation.context.delete", target, {"key": key})
        return Deleted(deleted=[key])

    return await run_in_threadpool(remove)
