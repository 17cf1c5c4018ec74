"""The conversation stream: WebSocket ``/v1/conversations/{id}/stream?after_seq=N``.

The server sends the conversation's events as JSON frames ``{seq, type, ...}``: first the stored
events after ``after_seq``, then live ones, token deltas included (``seq`` null). A client that
reconnects with the last ``seq`` it saw gets exactly what it missed. A ``subscribed`` frame says
the subscription is live: from then on no event (token deltas included) can be missed. An open
stream needs no conversation actor: its events come from where they are written (the store, and
the events hub every writer publishes to; ``Conversations.stream_events``), so the actor is
evicted while idle and started again by the next message, and the stream goes on. The client
sends ``{"type": "message", "content": ...}`` (the body of ``POST .../messages``: ``source``,
``model``, ``user_id``, ``reply_to_message_id``; ``to`` routes it to a thread, a session or a
persona as ``POST /v1/messages`` does), answered by an ``ack`` frame saying where it went (its
conversation, turn and message; ``forked``; ``streamed_here``: false when it went to another
conversation, whose own stream carries that turn), or ``{"type": "ping"}``; a frame the server
cannot use gets an ``error`` frame and the stream goes on. Authentication: the ``Authorization``
header, or ``?ticket=`` (a one-use stream ticket, ``stream_tickets``) for browsers; a key in the
URL (``?api_key=``) is refused. Refusals close the socket after an error frame, with the reason
in the close frame too: 4401 (bad key or ticket), 4404 (no such conversation), 4400 (bad query),
4429 (the client's concurrent-WebSocket quota is full); a message over the turn or token quota
gets an error frame (QUOTA_EXCEEDED) and the stream goes on. A key revoked or expired while its
stream is open closes the stream with 4401 after an error frame (``key_watch``); a user whose
membership is revoked loses its streams of that conversation with 4404 (``member_watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.encoders import jsonable_encoder
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect, WebSocketState

from core.access import Action, check
from core.domain import Conversation
from core.errors import InvalidInput, NotFound, Unauthorized, WonderError
from core.keys import ApiKey, hash_key
from serving.gateway.auth import (
    USER_HEADER,
    USER_PATTERN,
    authenticate,
    authenticate_hash,
    websocket_key,
)
from serving.gateway.context import GatewayContext, get_context
from serving.gateway.conversations import owned_conversation
from serving.gateway.errors import as_wonder_error
from serving.gateway.key_watch import get_key_watch
from serving.gateway.limits import MAX_FRAME_BYTES
from serving.gateway.member_access import level_of
from serving.gateway.member_watch import get_member_watch
from serving.gateway.messages import accept_message
from serving.gateway.protocol import ClientMessageFrame
from serving.gateway.quota_checks import get_guard
from serving.gateway.sessions import MessageRouted, send_routed
from serving.gateway.stream_tickets import redeem
from serving.gateway.translation import error_frame, frame_id, parse_client_frame

logger = logging.getLogger("wonder.gateway")

router = APIRouter()

# The stream's handshake names the node of the gateway replica that serves it (operators, and the
# node-loss tests: which clients were connected through a replica on the lost node).
NODE_HEADER = "x-wonder-node"

CLOSE_CODES = {
    "UNAUTHORIZED": 4401,
    "NOT_FOUND": 4404,
    "INVALID_INPUT": 4400,
    "QUOTA_EXCEEDED": 4429,
}


def websocket_user(websocket: WebSocket) -> str | None:
    """The acting user: the ``X-Wonder-User`` header, else ``?user_id=`` (browsers)."""
    user = websocket.headers.get(USER_HEADER) or websocket.query_params.get("user_id")
    if user is not None and not re.match(USER_PATTERN, user):
        raise InvalidInput(f"{USER_HEADER}: a user id of 1-200 letters, digits and _.:@+-")
    return user


def parse_after_seq(raw: str | None) -> int:
    """The ``after_seq`` query parameter: a non-negative integer, 0 when absent."""
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidInput(f"after_seq must be a non-negative integer, got {raw!r}")
    return int(raw)


def encode_frame(frame: dict[str, Any]) -> str:
    """A frame as JSON text, encoded once: events are plain JSON already (the common case, a
    token delta per frame, costs no walk over it); anything else in a frame (a datetime, a
    model) is encoded as FastAPI would."""
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False, default=jsonable_encoder)


class StreamSession:
    """One subscriber: pumps events out and reads client frames in, over one WebSocket."""

    def __init__(
        self,
        websocket: WebSocket,
        context: GatewayContext,
        conversation: Conversation,
        client_id: str,
        after_seq: int,
        key_hash: str = "",
        user: str | None = None,
    ) -> None:
        self.websocket = websocket
        self.context = context
        self.conversation = conversation
        self.client_id = client_id
        self.key_hash = key_hash
        self.user = user
        self.after_seq = after_seq
        self.subscribed = asyncio.Event()
        self._send_lock = asyncio.Lock()

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._send_lock:
            if self.websocket.application_state != WebSocketState.CONNECTED:
                raise WebSocketDisconnect(1006)
            await self.websocket.send_text(encode_frame(frame))

    async def run(self) -> None:
        pump = asyncio.create_task(self.pump_events())
        try:
            await self.receive_frames(pump)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await pump

    # ------------------------------------------------------------------ server → client

    async def pump_events(self) -> None:
        """Forward events until the stream ends; a broken one is reported and closed.

        ``Conversations.stream_events`` hands each durable event once and in order (reading
        from the store what it did not hear of); what still fails here is reported, and the
        client reconnects with the last ``seq`` it saw.
        """
        try:
            await self._forward(
                self.context.conversations.stream_events(
                    self.conversation.id, self.after_seq, marker=True
                )
            )
            await self.close(1000)
        except (WebSocketDisconnect, asyncio.CancelledError):
            raise
        except Exception as exc:  # reported to the client as an error frame, then closed
            error = as_wonder_error(exc)
            if error is None:
                logger.exception("stream of %s failed", self.conversation.id)
            await self.refuse(error or WonderError("the event stream failed"), code=1011)

    async def _forward(self, events: AsyncIterator[dict[str, Any]]) -> None:
        try:
            async for event in events:
                await self.send(event)
                if event.get("type") == "subscribed":
                    self.subscribed.set()
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    # ------------------------------------------------------------------ client → server

    async def receive_frames(self, pump: asyncio.Task[None]) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect" or pump.done():
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if len(raw) > MAX_FRAME_BYTES:  # characters or bytes: either bounds the work
                too_large = {
                    "code": "PAYLOAD_TOO_LARGE",
                    "message": f"a frame is limited to {MAX_FRAME_BYTES} bytes",
                    "retriable": False,
                }
                await self.send(error_frame(too_large, None))
                continue
            await self.handle_frame(raw)

    async def handle_frame(self, raw: str | bytes) -> None:
        request_id: str | None = None
        try:
            frame = parse_client_frame(raw)
            request_id = frame.id
            if isinstance(frame, ClientMessageFrame):
                await self.send(await self.post(frame))
            else:
                await self.send({"seq": None, "type": "pong", "id": frame.id})
        except WebSocketDisconnect:
            raise
        except Unauthorized as exc:  # the key stopped working: the stream ends
            await self.refuse(exc)
        except Exception as exc:  # every failure becomes an error frame; the stream goes on
            error = as_wonder_error(exc)
            if error is None:
                logger.exception("frame on %s failed", self.conversation.id)
                error = WonderError("internal error")
            await self.send(error_frame(error.to_dict(), request_id or frame_id(raw)))

    def admit_message(self, here: bool, author: str | None) -> None:
        authenticate_hash(self.context, self.key_hash)
        if self.user is not None and here:  # a routed message is checked where it goes
            level = level_of(self.context, self.client_id, self.conversation.id, self.user)
            check(level, Action.WRITE, self.user, self.conversation.id)
        get_guard(self.websocket).admit_turn(self.client_id, author)

    async def post(self, frame: ClientMessageFrame) -> dict[str, Any]:
        # One thread hop: the key may have been revoked since the stream opened (never start a
        # turn on it), a member may have lost its level, and the turn quotas.
        await run_in_threadpool(self.admit_message, frame.to is None, frame.user_id or self.user)
        routed = await (self.post_here(frame) if frame.to is None else self.post_routed(frame))
        ack = {
            "seq": None,
            "type": "ack",
            "conversation_id": routed.conversation_id,
            "turn_id": routed.turn_id,
            "message_id": routed.message_id,
            "message_seq": routed.seq,
            "forked": routed.forked,
            "session": routed.session,
            "streamed_here": routed.conversation_id == self.conversation.id,
        }
        if frame.id is not None:
            ack["id"] = frame.id
        return ack

    async def post_here(self, frame: ClientMessageFrame) -> MessageRouted:
        # Acknowledged in the store at once when no actor holds the conversation's log (its
        # actor is activated meanwhile), else by the actor in a few ms; either way the turn's
        # events reach this stream, whenever it subscribed.
        accepted = await accept_message(
            self.context, self.client_id, self.conversation.id, frame.message(), self.user
        )
        return MessageRouted(
            conversation_id=self.conversation.id,
            turn_id=accepted.turn_id,
            message_id=accepted.message_id,
            seq=accepted.seq,
            forked=False,
        )

    async def post_routed(self, frame: ClientMessageFrame) -> MessageRouted:
        """As ``POST /v1/messages``: it may land in another conversation (a fork, a session);
        this stream goes on following its own, and the ack says where the message went."""
        assert frame.to is not None
        to = frame.to.as_route()
        guard = get_guard(self.websocket)
        return await send_routed(
            self.context, guard, self.client_id, to, frame.message(), self.user
        )

    # ------------------------------------------------------------------ closing

    async def refuse(self, error: WonderError, code: int | None = None) -> None:
        await refuse(self.websocket, error, code, self._send_lock)

    async def key_refused(self, reason: str) -> None:
        await self.refuse(Unauthorized(reason))

    async def member_refused(self, reason: str) -> None:
        await self.refuse(NotFound(reason))

    async def close(self, code: int) -> None:
        if self.websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await self.websocket.close(code)


async def refuse(
    websocket: WebSocket,
    error: WonderError,
    code: int | None = None,
    lock: asyncio.Lock | None = None,
) -> None:
    """Send an error frame and close the socket (4401/4404/4400 by error code)."""
    if websocket.application_state != WebSocketState.CONNECTED:
        return
    close_code = code or CLOSE_CODES.get(str(error.code), 1011)
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        async with lock or asyncio.Lock():
            await websocket.send_json(error_frame(error.to_dict()))
            await websocket.close(close_code, reason=close_reason(error.message))


def close_reason(message: str) -> str:
    """A close frame's reason: at most 123 bytes of UTF-8 (RFC 6455)."""
    return message.encode()[:123].decode(errors="ignore")


def open_stream(
    context: GatewayContext, websocket: WebSocket, conversation_id: str
) -> tuple[ApiKey, str, Conversation, str | None]:
    """The key (and its hash), the client's conversation and the acting user, in one trip to
    the thread pool (a burst of new streams queues there: each trip waits for a thread and the
    GIL). A ticket brings its key and user; otherwise the header's key and the named user."""
    secret = websocket_key(websocket)  # first: a key in the URL is refused, ticket or not
    ticket = websocket.query_params.get("ticket")
    if ticket is not None:
        key, bound = redeem(context, ticket, conversation_id)
        named = websocket_user(websocket)
        if named is not None and named != bound.user_id:
            raise Unauthorized(f"the stream ticket was issued for {bound.user_id or 'the client'}")
        key_hash, user = bound.key_hash, bound.user_id
    else:
        key = authenticate(context, secret)
        key_hash, user = hash_key(secret or ""), None
    conversation = owned_conversation(context, key.client_id, conversation_id)
    return key, key_hash, conversation, user


@router.websocket("/v1/conversations/{conversation_id}/stream")
async def stream(websocket: WebSocket, conversation_id: str) -> None:
    """Subscribe to a conversation's events and send it messages."""
    context = get_context(websocket)
    await websocket.accept(
        headers=[(NODE_HEADER.encode(), context.node.encode())] if context.node else None
    )
    try:
        key, key_hash, conversation, user = await run_in_threadpool(
            open_stream, context, websocket, conversation_id
        )
        client_id = key.client_id
        after_seq = parse_after_seq(websocket.query_params.get("after_seq"))
        user = user or websocket_user(websocket)
        if user is not None:  # a user who is not a member: as if there were no conversation
            await run_in_threadpool(level_of, context, client_id, conversation_id, user)
    except WonderError as exc:
        await refuse(websocket, exc)
        return
    with contextlib.ExitStack() as held:
        try:  # one of the client's concurrent WebSockets, until this one closes
            held.enter_context(get_guard(websocket).websocket(client_id))
        except WonderError as exc:
            await refuse(websocket, exc)
            return
        session = StreamSession(
            websocket, context, conversation, client_id, after_seq, key_hash, user
        )
        held.enter_context(get_key_watch(websocket).watching(key, key_hash, session.key_refused))
        if user is not None:  # its membership revoked: the stream closes (``member_watch``)
            held.enter_context(
                get_member_watch(websocket).watching(conversation.id, user, session.member_refused)
            )
        with contextlib.suppress(WebSocketDisconnect):
            await session.run()
