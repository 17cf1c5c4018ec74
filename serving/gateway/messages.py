"""Messages: ``POST`` starts a turn (202 with its ids once both are durable); ``GET`` lists them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from core.domain import ConversationStatus, Message
from core.errors import Conflict, InvalidInput
from serving.gateway.auth import ClientId, Context, Guard
from serving.gateway.conversations import owned_conversation
from serving.gateway.members import USER_HEADER, User
from serving.gateway.protocol import Items, MessageAccepted, MessageCreate
from serving.gateway.quota_checks import admit_turn

router = APIRouter(prefix="/v1/conversations/{conversation_id}/messages", tags=["messages"])

MessageList = Items[Message]


@router.post(
    "",
    status_code=202,
    response_model=MessageAccepted,
    summary="Send a message: starts a turn; follow it on the stream or the events",
)
async def post_message(
    conversation_id: str,
    body: MessageCreate,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
) -> MessageAccepted:
    if user is not None and body.user_id not in (None, user):
        raise InvalidInput(f"user_id: the acting user is {user} (header {USER_HEADER})")
    conversation = await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    if conversation.status == ConversationStatus.COMPLETED:
        raise Conflict(f"conversation {conversation_id} is completed")
    await admit_turn(guard, client_id)
    accepted = await context.conversations.post_message(
        conversation_id,
        body.content,
        body.user_id or user or client_id,
        reply_to_message_id=body.reply_to_message_id,
    )
    return MessageAccepted(
        turn_id=accepted.turn_id, message_id=accepted.message_id, seq=accepted.seq
    )


@router.get("", response_model=MessageList, summary="List messages in conversation order")
def list_messages(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MessageList:
    owned_conversation(context, client_id, conversation_id)
    found = context.store.messages.list(conversation_id, after_seq=after_seq, limit=limit)
    return MessageList(items=found)
