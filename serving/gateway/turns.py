"""A conversation's history: turns (with their moves) and durable events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from core.domain import Turn
from core.errors import NotFound
from serving.gateway.auth import ClientId, Context
from serving.gateway.conversations import owned_conversation
from serving.gateway.protocol import EventOut, Items, TurnDetail
from serving.gateway.translation import event_frame

router = APIRouter(prefix="/v1/conversations/{conversation_id}")

TurnList = Items[Turn]
EventList = Items[EventOut]


@router.get("/turns", response_model=TurnList, tags=["turns"], summary="List turns")
def list_turns(conversation_id: str, context: Context, client_id: ClientId) -> TurnList:
    owned_conversation(context, client_id, conversation_id)
    return TurnList(items=context.store.turns.list(conversation_id))


@router.get(
    "/turns/{turn_id}",
    response_model=TurnDetail,
    tags=["turns"],
    summary="Get a turn with its moves",
)
def get_turn(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    owned_conversation(context, client_id, conversation_id)
    turn = context.store.turns.get(turn_id)
    if turn.conversation_id != conversation_id:
        raise NotFound(f"turn {turn_id} not found")
    moves = context.store.moves.list(turn_id)
    return TurnDetail.model_validate({**turn.model_dump(), "moves": moves})


@router.get(
    "/events",
    response_model=EventList,
    tags=["events"],
    summary="Durable events after a seq (the stream's replay, without token deltas)",
)
def list_events(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Any:
    owned_conversation(context, client_id, conversation_id)
    events = context.store.events.list(conversation_id, after_seq=after_seq, limit=limit)
    return {"items": [event_frame(e) for e in events]}
