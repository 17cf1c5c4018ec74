"""A conversation's history: turns (with their moves) and durable events (a fork's inherited ones
included and marked ``inherited_from``: ``serving.gateway.history``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from core.domain import TurnStatus
from core.errors import NotFound
from core.turn_filters import TurnFilter
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.conversations import Cursor, owned_conversation
from serving.gateway.cursors import cursor_key
from serving.gateway.history import (
    AfterSeq,
    BeforeSeq,
    SeqPage,
    Tail,
    TurnOut,
    event_page,
    seq_window,
    turn_page,
)
from serving.gateway.protocol import EventOut, Page, TurnDetail
from serving.gateway.translation import decode_cursor, encode_position

router = APIRouter(prefix="/v1/conversations/{conversation_id}")

TurnPage = Page[TurnOut]
EventPage = SeqPage[EventOut]


@router.get(
    "/turns",
    response_model=TurnPage,
    tags=["turns"],
    summary="List turns, oldest first (a fork's inherited ones too), filtered and paged",
)
def list_turns(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    tool: Annotated[str | None, Query(max_length=128, description="Called this tool")] = None,
    workflow_run: Annotated[
        str | None, Query(max_length=64, description="Started this workflow run")
    ] = None,
    failed: Annotated[
        bool | None, Query(description="The turn failed, or one of its tool calls did")
    ] = None,
    status: TurnStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size")] = 100,
    after_cursor: Cursor = None,
) -> TurnPage:
    owned_conversation(context, client_id, conversation_id)
    key = cursor_key(context)
    after = None
    if after_cursor:
        created, last_id = decode_cursor(after_cursor, key)
        after = (datetime.fromisoformat(created), last_id)
    where = TurnFilter(tool, _run_turn(context, client_id, workflow_run), failed, status)
    items, more = turn_page(context.store, conversation_id, where, after, limit)
    last = items[-1] if items and more else None
    cursor = encode_position(last.created_at, last.id, key) if last is not None else None
    return TurnPage(items=items, next_cursor=cursor)


def _run_turn(context: GatewayContext, client_id: str, run_id: str | None) -> frozenset[str] | None:
    """The turn that started ``run_id`` (none for a run of no turn, or no such run of the
    client's: the listing is empty, never an answer about another conversation's run)."""
    if run_id is None:
        return None
    try:
        run = context.workflows.get(run_id, client_id)
    except NotFound:
        return frozenset()
    return frozenset({run.context.turn_id} if run.context.turn_id else set())


@router.get(
    "/turns/{turn_id}",
    response_model=TurnDetail,
    tags=["turns"],
    summary="Get a turn with its moves (a fork's inherited turns too)",
)
def get_turn(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    owned_conversation(context, client_id, conversation_id)
    found = context.store.forks.turn(conversation_id, turn_id)
    if found is None:
        raise NotFound(f"turn {turn_id} not found")
    turn, seen = found
    moves = context.store.moves.list(turn_id)
    return TurnDetail.model_validate(
        {
            **turn.model_dump(),
            "moves": moves,
            "inherited_from": seen.inherited_from,
            "model": context.store.turn_models.for_turns([turn_id]).get(turn_id),
        }
    )


@router.get(
    "/events",
    response_model=EventPage,
    tags=["events"],
    summary="Durable events, forward (after_seq) or backward (before_seq, tail): the stream's "
    "replay without token deltas",
)
def list_events(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    after_seq: AfterSeq = None,
    before_seq: BeforeSeq = None,
    tail: Tail = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Any:
    window = seq_window(after_seq, before_seq, tail, limit)
    owned_conversation(context, client_id, conversation_id)
    return event_page(context.store, conversation_id, window)
