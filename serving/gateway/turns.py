"""A conversation's history: turns (with their moves) and durable events (a fork's inherited ones
included and marked ``inherited_from``: ``serving.gateway.history``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from core.errors import NotFound
from serving.gateway.auth import ClientId, Context
from serving.gateway.conversations import owned_conversation
from serving.gateway.history import (
    AfterSeq,
    BeforeSeq,
    SeqPage,
    Tail,
    TurnOut,
    event_page,
    seq_window,
    turn_list,
)
from serving.gateway.protocol import EventOut, Items, TurnDetail

router = APIRouter(prefix="/v1/conversations/{conversation_id}")

TurnList = Items[TurnOut]
EventPage = SeqPage[EventOut]


@router.get("/turns", response_model=TurnList, tags=["turns"], summary="List turns")
def list_turns(conversation_id: str, context: Context, client_id: ClientId) -> TurnList:
    owned_conversation(context, client_id, conversation_id)
    return TurnList(items=turn_list(context.store, conversation_id))


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
