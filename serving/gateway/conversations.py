"""Conversations: create, list (ancestry filter, cursor pages), get, children, complete, delete."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from core.conversations import create_conversation
from core.domain import Conversation
from core.errors import Conflict, NotFound
from core.fork_trees import LatestForks
from core.ids import new_id
from core.projects import (
    project_for_conversation,
    remove_conversation_workspaces,
    start_conversation_branch,
)
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.context import GatewayContext
from serving.gateway.cursors import cursor_key
from serving.gateway.members import start_owner
from serving.gateway.protocol import ConversationCreate, Deleted, Page
from serving.gateway.translation import (
    CURSOR_PATTERN,
    MAX_CURSOR_CHARS,
    decode_cursor,
    encode_cursor,
)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])

Limit = Annotated[int, Query(ge=1, le=200, description="Page size")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_CHARS,
        pattern=CURSOR_PATTERN,
        description="next_cursor of the last page",
    ),
]
ConversationPage = Page[Conversation]


def owned_conversation(
    context: GatewayContext, client_id: str, conversation_id: str
) -> Conversation:
    """The conversation if this client owns it; ``NotFound`` otherwise (never reveal others')."""
    return context.store.conversations.get(conversation_id, client_id=client_id)


def _page(
    context: GatewayContext,
    client_id: str,
    limit: int,
    after_cursor: str | None,
    member: str | None = None,
    latest_fork: bool = False,
    ancestry: str = "all",
    parent_id: str | None = None,
) -> ConversationPage:
    key = cursor_key(context)
    after = decode_cursor(after_cursor, key) if after_cursor else None
    if latest_fork:
        forks = LatestForks(context.store, client_id, member, ancestry)
        found = forks.page(after, limit)
    else:
        found = context.store.conversations.list(
            client_id,
            limit=limit + 1,
            after=after,
            member=member,
            ancestry=ancestry,
            parent_id=parent_id,
        )
    items = found[:limit]
    more = len(found) > limit
    cursor = encode_cursor(items[-1], key) if more else None
    return ConversationPage(items=items, next_cursor=cursor)


@router.post("", status_code=201, response_model=Conversation, summary="Start a conversation")
async def create(
    body: ConversationCreate, context: Context, client_id: ClientId, guard: Guard, user: User
) -> Conversation:
    """A new conversation; it gets the id of an already started actor when one is in reserve, so
    its first message is answered without waiting for a process to start."""
    await asyncio.to_thread(guard.admit_conversation, client_id)
    project = None
    if body.agent_id is not None:
        try:
            agent = context.store.agents.get(body.agent_id, client_id=client_id)
        except NotFound:
            raise NotFound(f"agent_id: agent {body.agent_id} not found") from None
        project = project_for_conversation(context.store, agent, body.project_id)
    conversation_id = await context.conversations.reserved_conversation_id() or new_id("conv")
    # The branch comes first: a conversation row never names a branch that does not exist.
    branch = (
        await asyncio.to_thread(start_conversation_branch, project, conversation_id)
        if project
        else None
    )
    conversation = create_conversation(
        context.store,
        client_id=client_id,
        agent_id=body.agent_id,
        title=body.title,
        conversation_id=conversation_id,
        project_id=project.id if project else None,
        branch=branch,
    )
    if user is not None:  # the user who starts a conversation owns it
        with context.store.db.begin() as conn:
            start_owner(context.store, conversation.id, user, conversation.created_at, conn)
    return conversation


@router.get("", response_model=ConversationPage, summary="List conversations")
def list_conversations(
    context: Context,
    client_id: ClientId,
    user: User,
    ancestry: Annotated[
        Literal["roots", "children", "all"],
        Query(
            description="roots: not started by another conversation (default); children: only "
            "those started by one (delegated work); all: both"
        ),
    ] = "roots",
    mode: Annotated[
        Literal["all", "latest-fork"],
        Query(
            description="latest-fork: of each fork tree (a conversation and its forks), only "
            "the latest conversation the listing keeps"
        ),
    ] = "all",
    limit: Limit = 50,
    after_cursor: Cursor = None,
) -> ConversationPage:
    """Conversations ordered by (created_at, id): the ancestry filter first, then the mode."""
    latest = mode == "latest-fork"
    return _page(context, client_id, limit, after_cursor, user, latest, ancestry=ancestry)


@router.get("/{conversation_id}", response_model=Conversation, summary="Get a conversation")
def get(conversation_id: str, context: Context, client_id: ClientId) -> Conversation:
    return owned_conversation(context, client_id, conversation_id)


@router.get(
    "/{conversation_id}/children",
    response_model=ConversationPage,
    summary="Child conversations this one started, ordered by (created_at, id)",
)
def children(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    user: User,
    limit: Limit = 50,
    after_cursor: Cursor = None,
) -> ConversationPage:
    owned_conversation(context, client_id, conversation_id)
    return _page(context, client_id, limit, after_cursor, user, parent_id=conversation_id)


@router.post(
    "/{conversation_id}/complete",
    response_model=Conversation,
    summary="Mark a conversation completed (only a user completes a conversation)",
)
async def complete(conversation_id: str, context: Context, client_id: ClientId) -> Conversation:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    await context.conversations.complete_conversation(conversation_id)
    return await run_in_threadpool(owned_conversation, context, client_id, conversation_id)


@router.delete(
    "/{conversation_id}",
    response_model=Deleted,
    summary="Delete a conversation and every child conversation it started (409 while a fork "
    "inherits from any of them); their workspaces go, and their branches unless unmerged",
)
async def delete(
    conversation_id: str, context: Context, client_id: ClientId, audit: Audit
) -> Deleted:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    # Live actors stop first (their turns are cancelled), so nothing writes rows for a deleted one.
    tree = await run_in_threadpool(context.store.conversation_tree, conversation_id)
    forks = await run_in_threadpool(context.store.forks.dependents, tree)
    if forks:  # a fork reads its inherited history from its source's rows (core.forks)
        raise Conflict(f"conversation {conversation_id} has forks; delete them first: {forks}")
    await context.conversations.stop_conversations(tree)
    if context.workspaces is not None:  # their worktrees and actors; merged branches too
        await remove_conversation_workspaces(
            context.store, context.settings, context.workspaces, tree
        )
    deleted = await run_in_threadpool(context.store.delete_conversation_tree, conversation_id)
    target = f"conversations:{conversation_id}"
    await run_in_threadpool(audit.record, "conversation.delete", target, {"deleted": deleted})
    return Deleted(deleted=deleted)
