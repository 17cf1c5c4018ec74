"""Messages: ``POST`` starts a turn (202 with its ids once both are durable); ``GET`` lists them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from core.agent_personas import agent_profile
from core.domain import ConversationStatus
from core.errors import Conflict
from core.ids import new_id
from core.model_override import check_override
from core.route_model import MessageRoute, RouteDecision
from core.turn_model import ModelOverride, TurnModel
from serving.gateway.auth import USER_HEADER, ClientId, Context, Guard, User
from serving.gateway.context import GatewayContext
from serving.gateway.conversations import owned_conversation
from serving.gateway.history import (
    AfterSeq,
    BeforeSeq,
    MessageOut,
    SeqPage,
    Tail,
    message_page,
    seq_window,
)
from serving.gateway.protocol import MessageAccepted, MessageCreate
from serving.gateway.quota_checks import admit_turn

router = APIRouter(prefix="/v1/conversations/{conversation_id}/messages", tags=["messages"])

MessagePage = SeqPage[MessageOut]


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
    conversation = await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    if conversation.status == ConversationStatus.COMPLETED:
        raise Conflict(f"conversation {conversation_id} is completed")
    await admit_turn(guard, client_id, body.user_id or user)
    return await accept_message(context, client_id, conversation_id, body, user)


def check_model(
    context: GatewayContext, client_id: str, conversation_id: str, override: ModelOverride
) -> None:
    """The override's profile exists; thinking only where the model thinks (the profile it
    names, else the conversation's agent's)."""
    default = None
    if override.thinking is not None and override.model_profile_id is None:
        agent_id = context.store.conversations.get(conversation_id).agent_id
        if agent_id is not None:
            default = agent_profile(context.store, context.store.agents.get(agent_id))
    check_override(context.store, override, client_id, default)


def check_author(body: MessageCreate, user: str | None) -> None:
    """A message may name its author (``user_id``) only as the acting user, if there is one
    (another is a ``Conflict``: the body disagrees with the header)."""
    if user is not None and body.user_id not in (None, user):
        raise Conflict(f"user_id: the acting user is {user} (header {USER_HEADER})")


async def accept_message(
    context: GatewayContext,
    client_id: str,
    conversation_id: str,
    body: MessageCreate,
    user: str | None = None,
    *,
    author: str | None = None,
    decision: RouteDecision | None = None,
) -> MessageAccepted:
    """Post an admitted message to the conversation (its model override checked and recorded
    first), authored by ``body.user_id``, else the acting ``user``, else the client.
    ``author``: the platform posting on ``user``'s behalf (a webhook, ``hook:<id>``), in place of
    a body's ``user_id``. ``decision``: how smart routing chose this conversation, stored with the
    message (so are the body's ``permissions``, which its turn applies)."""
    if author is None:
        check_author(body, user)
    message_id = None
    if body.model is not None:  # recorded before the message, so its turn finds it
        await run_in_threadpool(check_model, context, client_id, conversation_id, body.model)
        message_id = new_id("msg")
        record = TurnModel(message_id=message_id, override=body.model)
        await run_in_threadpool(context.store.turn_models.save, record)
    if body.permissions is not None or decision is not None:  # the same: before the message
        message_id = message_id or new_id("msg")
        routed = MessageRoute(
            message_id=message_id,
            conversation_id=conversation_id,
            decision=decision,
            permissions=body.permissions,
        )
        await run_in_threadpool(context.store.message_routes.save, routed)
    accepted = await context.conversations.post_message(
        conversation_id,
        body.content,
        author or body.user_id or user or client_id,
        source=body.source,
        reply_to_message_id=body.reply_to_message_id,
        message_id=message_id,
    )
    return MessageAccepted(
        turn_id=accepted.turn_id, message_id=accepted.message_id, seq=accepted.seq
    )


@router.get(
    "",
    response_model=MessagePage,
    summary="List messages in conversation order, forward (after_seq) or backward (before_seq, "
    "tail); a fork's inherited messages included",
)
def list_messages(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    after_seq: AfterSeq = None,
    before_seq: BeforeSeq = None,
    tail: Tail = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MessagePage:
    window = seq_window(after_seq, before_seq, tail, limit)
    owned_conversation(context, client_id, conversation_id)
    return message_page(context.store, conversation_id, window)
