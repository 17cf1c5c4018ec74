"""A turn's recorded model calls, what it caused, and usage totals (docs/observability.md).

Read from the records the processes that made the calls wrote (``core.store`` ``model_calls``,
``turn_links``), never from the conversation's events. Access is the conversation's: a turn is
read through a conversation the client owns (its own turns, or a fork's inherited ones), anything
else is a 404, and the member check of every ``/v1/conversations/{id}`` route applies.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from core.domain import Turn
from core.errors import NotFound, WonderError
from core.memory.objects import ObjectStore, open_object_store
from core.model_calls import ModelCallRecord, TurnLink, UsageTotals
from core.record_sink import load_bodies
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.conversations import owned_conversation
from serving.gateway.protocol import Items
from serving.gateway.query_params import Rfc3339Time

router = APIRouter(prefix="/v1/conversations/{conversation_id}")
usage_router = APIRouter(prefix="/v1")

CallList = Items[ModelCallRecord]
LinkList = Items[TurnLink]
MAX_CALLS = 1000


def readable_turn(
    context: GatewayContext, client_id: str, conversation_id: str, turn_id: str
) -> Turn:
    """The turn if the client reads it through this conversation; ``NotFound`` otherwise."""
    owned_conversation(context, client_id, conversation_id)
    found = context.store.forks.turn(conversation_id, turn_id)
    if found is None:
        raise NotFound(f"turn {turn_id} not found")
    return found[0]


def _objects(context: GatewayContext) -> ObjectStore | None:
    settings = context.settings
    try:
        return open_object_store(settings.resolved_object_uri, settings.s3_endpoint_url)
    except (WonderError, OSError, ValueError):
        return None  # the rows still say where their bodies are


@router.get(
    "/turns/{turn_id}/calls",
    response_model=CallList,
    tags=["turns"],
    summary="The turn's model calls: each request exactly as sent and the response as received",
)
def list_calls(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    readable_turn(context, client_id, conversation_id, turn_id)
    calls = context.store.records.calls(turn_ids=[turn_id], limit=MAX_CALLS)
    if any(c.request_ref or c.response_ref for c in calls):
        objects = _objects(context)
        calls = [load_bodies(c, objects) for c in calls]
    return CallList(items=calls)


@router.get(
    "/turns/{turn_id}/links",
    response_model=LinkList,
    tags=["turns"],
    summary="What the turn caused or used: hook runs, workflow runs, delegated turns, memory "
    "writes, its model",
)
def list_links(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    readable_turn(context, client_id, conversation_id, turn_id)
    return LinkList(items=context.store.records.links(turn_id))


@router.get(
    "/turns/{turn_id}/usage",
    response_model=UsageTotals,
    tags=["turns"],
    summary="The turn's model calls summed: calls, failures, tokens, estimated cost",
)
def turn_usage(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    turn = readable_turn(context, client_id, conversation_id, turn_id)
    owner = context.store.conversations.get(turn.conversation_id).client_id
    return context.store.records.usage(client_id=owner, turn_ids=[turn_id])


@router.get(
    "/usage",
    response_model=UsageTotals,
    tags=["conversations"],
    summary="The conversation's model calls summed (its own turns)",
)
def conversation_usage(conversation_id: str, context: Context, client_id: ClientId) -> Any:
    owned_conversation(context, client_id, conversation_id)
    return context.store.records.usage(client_id=client_id, conversation_ids=[conversation_id])


@usage_router.get(
    "/usage",
    response_model=UsageTotals,
    tags=["conversations"],
    summary="This client's model calls summed (optionally one agent's, since a time)",
)
def client_usage(
    context: Context,
    client_id: ClientId,
    agent_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    since: Annotated[
        Rfc3339Time | None, Query(description="Calls made at or after this time (with a time zone)")
    ] = None,
) -> Any:
    return context.store.records.usage(client_id=client_id, agent_id=agent_id, since=since)
