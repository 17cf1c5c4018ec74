"""Forks (seed 003): ``POST /v1/conversations/{id}/forks`` and the paged list of a source's forks.

The rules (which turn, what is inherited, what deleting does) are in ``core.forks``.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import Conversation
from core.forks import fork_conversation
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.conversations import ConversationPage, Cursor, Limit, owned_conversation
from serving.gateway.cursors import cursor_key
from serving.gateway.protocol import WireModel
from serving.gateway.translation import decode_cursor, encode_cursor

router = APIRouter(prefix="/v1/conversations/{conversation_id}/forks", tags=["conversations"])


class ForkCreate(WireModel):
    turn_id: str = Field(
        max_length=64,
        description="The turn to fork at: the fork sees the source's history up to and "
        "including this turn",
    )
    title: str | None = Field(None, max_length=200, description="Default: the source's title")


@router.post(
    "",
    status_code=201,
    response_model=Conversation,
    summary="Fork a conversation at a turn: a new conversation whose history is the source's up "
    "to and including that turn",
)
async def create_fork(
    conversation_id: str,
    body: ForkCreate,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
) -> Conversation:
    source = await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    await run_in_threadpool(guard.admit_conversation, client_id)
    return await run_in_threadpool(
        fork_conversation, context.store, source, body.turn_id, title=body.title, owner=user
    )


@router.get(
    "",
    response_model=ConversationPage,
    summary="Forks made from this conversation, ordered by (created_at, id)",
)
def list_forks(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    user: User,
    limit: Limit = 50,
    after_cursor: Cursor = None,
) -> ConversationPage:
    owned_conversation(context, client_id, conversation_id)
    key = cursor_key(context)
    after = decode_cursor(after_cursor, key) if after_cursor else None
    found = context.store.forks.forks_of(  # with a user: only the forks it is a member of
        conversation_id, client_id, limit=limit + 1, after=after, member=user
    )
    items = found[:limit]
    more = len(found) > limit
    cursor = encode_cursor(items[-1], key) if more else None
    return ConversationPage(items=items, next_cursor=cursor)
