"""Stream tickets: open a conversation's WebSocket without putting the API key in its URL.

Browsers cannot set headers on a WebSocket, and a query string ends up in proxy and server logs.
So a browser asks ``POST /v1/stream-tickets {"conversation_id"}`` (with its key in the
``Authorization`` header, as every REST call) and opens the stream with ``?ticket=<ticket>``. A
ticket is opaque, random (256 bits), stored only as its SHA-256, bound to the key, the client,
the acting user and the conversation, valid for ``WONDER_STREAM_TICKET_TTL_S`` (default 30 s),
and good for one connection: redeeming it deletes it. The stream then works for that key and user
as if they had connected with headers (the key's revocation and the user's membership are
watched as on any stream). ``?api_key=`` is refused: keys never travel in URLs.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.errors import Unauthorized
from core.ids import utc_now
from core.keys import ApiKey, hash_key
from core.store.stream_tickets import StreamTicket
from serving.gateway.auth import BearerSecret, Context, RequestKey, User, authenticate_hash
from serving.gateway.context import GatewayContext
from serving.gateway.member_access import level_of
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1/stream-tickets", tags=["conversations"])

TICKET_PREFIX = "wst_"
MAX_TICKET_CHARS = 128


class TicketCreate(WireModel):
    conversation_id: str = Field(min_length=1, max_length=64, description="The stream to open")


class TicketOut(WireModel):
    ticket: str = Field(description="Pass as ?ticket= on the stream's URL; works once")
    conversation_id: str
    user_id: str | None = Field(description="The acting user the stream will have")
    expires_at: datetime = Field(description="Unused after this, it is refused")


def issue(
    context: GatewayContext, key: ApiKey, key_hash: str, user: str | None, conversation_id: str
) -> TicketOut:
    """A new ticket for ``key`` (and ``user``, who must be a member) on the client's
    conversation; ``NotFound`` as the stream itself would answer."""
    context.store.conversations.get(conversation_id, client_id=key.client_id)
    if user is not None:
        level_of(context, key.client_id, conversation_id, user)  # any member may follow
    now = utc_now()
    ticket = TICKET_PREFIX + secrets.token_urlsafe(32)
    bound = StreamTicket(
        client_id=key.client_id,
        key_hash=key_hash,
        user_id=user,
        conversation_id=conversation_id,
        expires_at=now + timedelta(seconds=context.settings.stream_ticket_ttl_s),
    )
    context.store.stream_tickets.issue(hash_key(ticket), bound, now)
    return TicketOut(
        ticket=ticket,
        conversation_id=conversation_id,
        user_id=user,
        expires_at=bound.expires_at,
    )


def redeem(
    context: GatewayContext, ticket: str, conversation_id: str
) -> tuple[ApiKey, StreamTicket]:
    """The key and binding of a ticket, used up now; ``Unauthorized`` for an unknown, used,
    expired or mismatched ticket, or one whose key no longer works."""
    if len(ticket) > MAX_TICKET_CHARS or not ticket.startswith(TICKET_PREFIX):
        raise Unauthorized("invalid stream ticket")
    found = context.store.stream_tickets.redeem(hash_key(ticket))
    if found is None:
        raise Unauthorized("invalid stream ticket (unknown, or already used: each works once)")
    if found.expires_at <= utc_now():
        raise Unauthorized("the stream ticket expired: ask POST /v1/stream-tickets for another")
    if found.conversation_id != conversation_id:
        raise Unauthorized("the stream ticket was issued for another conversation")
    return authenticate_hash(context, found.key_hash), found


@router.post(
    "",
    status_code=201,
    response_model=TicketOut,
    summary="A one-use ticket (30 s) that opens a conversation's stream: ?ticket= in place of "
    "a key in the URL",
)
async def create_ticket(
    body: TicketCreate, context: Context, key: RequestKey, secret: BearerSecret, user: User
) -> TicketOut:
    key_hash = hash_key(secret or "")  # authenticated: the secret of ``key``
    return await run_in_threadpool(issue, context, key, key_hash, user, body.conversation_id)
