"""One turn of an agent for the protocol front doors (MCP, A2A, OpenAI chat completions).

Each protocol asks the same thing: "this message, to this agent (in this conversation, or a new
one), and tell me how it goes". The answer goes through the REST API's own steps, so a turn
started over a protocol is a turn like any other: the conversation is created by the route that
creates conversations (quotas, the acting user as its owner), the message is posted by
``messages.accept_message`` (the same ``post_message`` path as ``POST .../messages``: no other
writer of the conversation's log), and what happens is read back from the conversation's event
stream (``Conversations.stream_events``): token deltas, tool moves, the agent's messages, and the
turn's end. Access: the conversation must be the client's, and an acting user must be one of its
writers (``member_access.check_reach``, the rule every REST route follows).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from starlette.concurrency import run_in_threadpool

from core.domain import Conversation, ConversationStatus
from core.errors import Conflict, NotFound
from core.jsontypes import JsonObject
from serving.gateway import conversations
from serving.gateway.context import GatewayContext
from serving.gateway.member_access import check_reach
from serving.gateway.messages import accept_message
from serving.gateway.protocol import ConversationCreate, MessageAccepted, MessageCreate
from serving.gateway.quota_checks import QuotaGuard, admit_turn

MESSAGES_ROUTE = "/v1/conversations/{conversation_id}/messages"
CONVERSATION_ROUTE = "/v1/conversations/{conversation_id}"


@dataclass(frozen=True, slots=True)
class Asker:
    """Who asks: the API key's client, the acting user (None: the client itself), and the
    client's quota guard."""

    context: GatewayContext
    guard: QuotaGuard
    client_id: str
    user: str | None = None


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """Words of the agent's reply as the model writes them (not stored; may be missed)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolMove:
    """The agent called a tool (its name), or a tool answered (``failed`` when it did not)."""

    name: str
    done: bool = False
    failed: bool = False


@dataclass(frozen=True, slots=True)
class AgentSaid:
    """One of the agent's messages in this turn, as stored."""

    message_id: str
    content: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn completed or failed (its reason then, and what failed: its code, and whether
    asking again may help; a failure that names nothing is taken as retriable)."""

    status: Literal["completed", "failed"]
    failure_reason: str | None = None
    usage: JsonObject = field(default_factory=dict)
    failure_code: str | None = None
    retriable: bool = True


Progress = TokenDelta | ToolMove | AgentSaid | TurnEnded


@dataclass(frozen=True, slots=True)
class StartedTurn:
    """A turn that was accepted: where it runs and the ids the REST API would have answered."""

    conversation: Conversation
    accepted: MessageAccepted


def agent_of(asker: Asker, agent_id: str) -> None:
    """``NotFound`` unless the client has this agent."""
    asker.context.store.agents.get(agent_id, client_id=asker.client_id)


def readable_conversation(asker: Asker, conversation_id: str) -> Conversation:
    """The client's conversation, if the acting user may read it (else ``NotFound``, as the
    REST routes answer)."""
    found = asker.context.store.conversations.get(conversation_id, client_id=asker.client_id)
    if asker.user is not None:
        params = {"conversation_id": conversation_id}
        check_reach(asker.context, asker.client_id, asker.user, "GET", CONVERSATION_ROUTE, params)
    return found


def writable_conversation(asker: Asker, conversation_id: str, agent_id: str) -> Conversation:
    """The client's conversation with ``agent_id`` as its agent, if the acting user may post to
    it; ``NotFound`` / ``PermissionDenied`` / ``Conflict`` otherwise."""
    found = asker.context.store.conversations.get(conversation_id, client_id=asker.client_id)
    if asker.user is not None:
        params = {"conversation_id": conversation_id}
        check_reach(asker.context, asker.client_id, asker.user, "POST", MESSAGES_ROUTE, params)
    if found.agent_id != agent_id:
        raise Conflict(f"conversation {conversation_id} is not a conversation with {agent_id}")
    if found.status == ConversationStatus.COMPLETED:
        raise Conflict(f"conversation {conversation_id} is completed")
    return found


async def open_conversation(
    asker: Asker, agent_id: str, conversation_id: str | None, title: str | None = None
) -> Conversation:
    """The conversation to post to: the named one (checked), or a new one with the agent,
    created by the REST route's own handler."""
    if conversation_id is not None:
        return await run_in_threadpool(writable_conversation, asker, conversation_id, agent_id)
    try:
        await run_in_threadpool(agent_of, asker, agent_id)
    except NotFound:
        raise NotFound(f"agent {agent_id} not found") from None
    body = ConversationCreate(agent_id=agent_id, title=title)
    return await conversations.create(body, asker.context, asker.client_id, asker.guard, asker.user)


async def start_turn(
    asker: Asker,
    agent_id: str,
    content: str,
    conversation_id: str | None = None,
    title: str | None = None,
) -> StartedTurn:
    """Post ``content`` to the agent (a new conversation unless one is named); returns once the
    message and its turn are durable, as ``POST .../messages`` does."""
    conversation = await open_conversation(asker, agent_id, conversation_id, title)
    await admit_turn(asker.guard, asker.client_id, asker.user)
    body = MessageCreate(content=content)
    accepted = await accept_message(
        asker.context, asker.client_id, conversation.id, body, asker.user
    )
    return StartedTurn(conversation=conversation, accepted=accepted)


def progress_of(event: JsonObject, turn_id: str) -> Progress | None:
    """What one event of the conversation's stream says about ``turn_id`` (None: nothing)."""
    kind = event.get("type")
    if kind == "token" and event.get("turn_id") == turn_id:
        return TokenDelta(str(event.get("delta") or ""))
    if kind in ("turn.completed", "turn.failed") and event.get("turn_id") == turn_id:
        usage = event.get("usage")
        error = event.get("error")
        error = error if isinstance(error, dict) else {}
        return TurnEnded(
            status="completed" if kind == "turn.completed" else "failed",
            failure_reason=_text_or_none(event.get("reason") or event.get("failure_reason")),
            usage=usage if isinstance(usage, dict) else {},
            failure_code=_text_or_none(error.get("code")),
            retriable=error.get("retriable") is not False,
        )
    if kind == "message":
        message = event.get("message")
        if (
            isinstance(message, dict)
            and message.get("turn_id") == turn_id
            and message.get("role") == "agent"
        ):
            return AgentSaid(str(message.get("id")), str(message.get("content") or ""))
    if kind == "move":
        return _move_progress(event.get("move"), turn_id)
    return None


def _move_progress(move: object, turn_id: str) -> ToolMove | None:
    if not isinstance(move, dict) or move.get("turn_id") != turn_id:
        return None
    call = move.get("tool_call")
    if not isinstance(call, dict):
        return None
    result = move.get("tool_result")
    done = isinstance(result, dict)
    failed = done and isinstance(result, dict) and result.get("success") is False
    return ToolMove(name=str(call.get("name")), done=done, failed=failed)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


async def follow_turn(
    context: GatewayContext, started: StartedTurn, timeout_s: float
) -> AsyncIterator[Progress]:
    """The turn's progress, ending with its ``TurnEnded`` (or ``TurnEnded("failed")`` when it
    has not ended within ``timeout_s``: the turn goes on; its conversation has the rest)."""
    conversation_id = started.conversation.id
    turn_id = started.accepted.turn_id
    # From the message's own event on (a message queued without one: from the start, filtered).
    after_seq = started.accepted.seq or 0
    events = context.conversations.stream_events(conversation_id, after_seq)
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError
            event = await asyncio.wait_for(anext(events), left)
            progress = progress_of(event, turn_id)
            if progress is None:
                continue
            yield progress
            if isinstance(progress, TurnEnded):
                return
    except TimeoutError:
        reason = (
            f"no answer within {timeout_s:g} s; the turn goes on in conversation "
            f"{conversation_id} (turn {turn_id})"
        )
        yield TurnEnded(status="failed", failure_reason=reason)
    except StopAsyncIteration:
        yield TurnEnded(status="failed", failure_reason="the conversation's stream ended")
    finally:
        await _close(events)


async def _close(events: AsyncIterator[JsonObject]) -> None:
    closer = getattr(events, "aclose", None)
    if closer is not None:
        await closer()


class Reconciler:
    """Token deltas as they come; at each of the agent's stored messages, whatever of it the
    deltas did not already carry (tokens are not stored and a late subscriber may miss some)."""

    def __init__(self) -> None:
        self.pending = ""

    def token(self, text: str) -> str:
        self.pending += text
        return text

    def said(self, content: str) -> str:
        streamed, self.pending = self.pending, ""
        if content.startswith(streamed):
            return content[len(streamed) :]
        return "" if streamed.strip() == content.strip() else "\n" + content

    def boundary(self) -> None:
        self.pending = ""


@dataclass
class Answer:
    """What a whole turn came to: the agent's messages joined, and how it ended."""

    text: str
    ended: TurnEnded
    messages: list[AgentSaid] = field(default_factory=list)


def answer_of(said: list[AgentSaid], ended: TurnEnded) -> Answer:
    return Answer(text="\n\n".join(m.content for m in said), ended=ended, messages=said)


async def run_turn(context: GatewayContext, started: StartedTurn, timeout_s: float) -> Answer:
    """Follow the turn to its end; its answer."""
    said: list[AgentSaid] = []
    async for progress in follow_turn(context, started, timeout_s):
        if isinstance(progress, AgentSaid):
            said.append(progress)
        elif isinstance(progress, TurnEnded):
            return answer_of(said, progress)
    return answer_of(said, TurnEnded(status="failed", failure_reason="no end"))
