"""Users inside a client and their access to conversations (issue 13; rules: ``core.access``).

The client's app names the acting user with the header ``X-Wonder-User: <user id>`` (on the
WebSocket also ``?user_id=``). Without it a request acts as the client itself (everything its key
may do). With it, every route of a conversation checks the user's level there: a user who is not
a member gets 404 (as if the conversation did not exist), a member below the level an action needs
gets 403 (``serving.gateway.member_access`` checks every route). Listings show only the
conversations the user is a member of. Revoking a member closes its open streams of the
conversation (``serving.gateway.member_watch``).

``GET /v1/conversations/{id}/members`` lists members (read); ``PUT .../members/{user_id}``
``{"level"}`` grants or changes one, ``DELETE .../members/{user_id}`` revokes one (manage; owner
to make or unmake an owner). The user who creates a conversation owns it; a child conversation
copies its parent's members; ``start_owner`` makes a new conversation's user its owner (forks).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import Field
from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool

from core.access import Level, action_for_grant, check
from core.errors import Conflict, NotFound
from core.ids import utc_now
from core.store import Store
from core.store.members import Member
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import USER_HEADER as USER_HEADER  # re-exported: its older home
from serving.gateway.auth import USER_PATTERN as USER_PATTERN
from serving.gateway.auth import ClientId, Context, User
from serving.gateway.context import GatewayContext
from serving.gateway.member_access import level_of
from serving.gateway.member_watch import get_member_watch
from serving.gateway.protocol import Items, WireModel

router = APIRouter(prefix="/v1/conversations/{conversation_id}/members", tags=["members"])

UserPath = Annotated[str, Path(pattern=USER_PATTERN, description="A user id of your app")]


class MemberGrant(WireModel):
    level: str = Field(
        pattern="^(reader|writer|manager|owner)$",
        description="reader | writer | manager | owner",
    )


def start_owner(
    store: Store, conversation_id: str, user_id: str | None, at: datetime, conn: Connection
) -> None:
    """Make ``user_id`` the owner of a conversation it just started (a new one, a fork); inside
    the caller's transaction. Nothing without a user (the client acts)."""
    if user_id is not None:
        store.members.grant(conversation_id, user_id, Level.OWNER, at, user_id, conn)


@router.get("", response_model=Items[Member], summary="The conversation's members")
def list_members(conversation_id: str, context: Context, client_id: ClientId) -> Items[Member]:
    context.store.conversations.get(conversation_id, client_id=client_id)
    return Items[Member](items=context.store.members.list(conversation_id))


def _change(
    context: GatewayContext,
    client_id: str,
    user: str | None,
    conversation_id: str,
    target: str,
    wanted: Level | None,
) -> Level | None:
    """Check that ``user`` may move ``target`` to ``wanted``; returns the target's level now."""
    context.store.conversations.get(conversation_id, client_id=client_id)
    current = context.store.members.level(conversation_id, target)
    if user is not None:
        level = level_of(context, client_id, conversation_id, user)
        check(level, action_for_grant(current, wanted), user, conversation_id)
    if current == Level.OWNER and wanted != Level.OWNER:
        owners = [m for m in context.store.members.list(conversation_id) if m.level == "owner"]
        if len(owners) == 1:
            raise Conflict(
                f"{target} is the last owner of conversation {conversation_id}: "
                "make another member owner first"
            )
    return current


@router.put("/{user_id}", response_model=Member, summary="Grant a user a level (manager; owner)")
async def grant(
    conversation_id: str,
    user_id: UserPath,
    body: MemberGrant,
    context: Context,
    client_id: ClientId,
    user: User,
    audit: Audit,
) -> Member:
    wanted = Level.parse(body.level)
    await run_in_threadpool(_change, context, client_id, user, conversation_id, user_id, wanted)
    member = await run_in_threadpool(
        context.store.members.grant, conversation_id, user_id, wanted, utc_now(), user
    )
    details = {"user_id": user_id, "level": wanted.label, "by": user}
    target = f"conversations:{conversation_id}"
    await run_in_threadpool(audit.record, "member.grant", target, details)
    return member


@router.delete("/{user_id}", response_model=Items[Member], summary="Revoke a user's access")
async def revoke(
    conversation_id: str,
    user_id: UserPath,
    request: Request,
    context: Context,
    client_id: ClientId,
    user: User,
    audit: Audit,
) -> Items[Member]:
    current = await run_in_threadpool(
        _change, context, client_id, user, conversation_id, user_id, None
    )
    if current is None:
        raise NotFound(f"user {user_id} is not a member of conversation {conversation_id}")
    await run_in_threadpool(context.store.members.revoke, conversation_id, user_id)
    # The user's open streams of it close now on this replica (on others within a second).
    reason = f"user {user_id} is no longer a member of conversation {conversation_id}"
    await get_member_watch(request).refuse(conversation_id, user_id, reason)
    details = {"user_id": user_id, "by": user}
    target = f"conversations:{conversation_id}"
    await run_in_threadpool(audit.record, "member.revoke", target, details)
    return Items[Member](items=await run_in_threadpool(context.store.members.list, conversation_id))
