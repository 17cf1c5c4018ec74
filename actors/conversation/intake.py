"""Taking a message in: its parent turn, a retried message recognised, refusals, and the
acknowledgement a caller may write while the conversation's actor is not ready yet.

The actor takes messages in itself (``ConversationActor.post_message``). While its actor is being
started or re-activated (a second or more), whoever received the message (the ``Conversations``
adapter in the gateway) may acknowledge it here instead, so a user gets ``202`` in milliseconds:
the same planning (``plan(MessageReceived)`` on the conversation as the store holds it), the same
writes, one transaction, ``seq`` allocated by the store (so the actor and this writer keep the
sequence gap-free). It does so only while the conversation has no active turn — checked inside
that transaction, after the store's lock — so the concurrency policy has nothing to decide: the
turn is stored acknowledged-but-not-started and the actor starts it when it is ready, at
construction (recovery) or when the caller's own message reaches it (``post_message`` finds the
message stored and picks its turn up).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from actors.conversation.domain import (
    AssembleContext,
    BeginTurn,
    ConversationState,
    Decision,
    MarkConversation,
    MessageReceived,
    Refuse,
)
from actors.conversation.log import ConversationLog, PendingWrite
from actors.conversation.planning import plan
from actors.conversation.records import BatchWriter
from core.domain import Event, MessageSource, TurnStatus, UserCaller
from core.errors import Conflict, ErrorCode, InvalidInput, NonRetryableError, NotFound
from core.forks import latest_turn_id
from core.ids import new_id_after, utc_now
from core.ports import MessageAck
from core.store import Store

REFUSALS: dict[ErrorCode, type[NonRetryableError]] = {
    ErrorCode.CONFLICT: Conflict,
    ErrorCode.INVALID_INPUT: InvalidInput,
    ErrorCode.NOT_FOUND: NotFound,
}


def raise_refusal(decisions: Sequence[Decision]) -> None:
    """Raise the error a ``Refuse`` decision stands for (the caller gets a precise 4xx)."""
    for decision in decisions:
        match decision:
            case Refuse(code=code, message=message):
                raise REFUSALS.get(code, NonRetryableError)(message)
            case _:
                pass


def existing_ack(store: Store, conversation_id: str, message_id: str) -> MessageAck | None:
    """The acknowledgement of a message already stored (a retried post), if it is."""
    try:
        message = store.messages.get(message_id)
    except NotFound:
        return None
    if message.conversation_id != conversation_id:
        raise Conflict(f"message id {message_id} is used by another conversation")
    return MessageAck(
        conversation_id=conversation_id,
        turn_id=message.turn_id,
        message_id=message.id,
        seq=message.seq,
    )


def parent_turn(store: Store, conversation_id: str, reply_to_message_id: str | None) -> str | None:
    """The turn a new one follows: the replied-to message's (inherited ones of a fork too), else
    the conversation's latest (a fresh fork's: the turn it forks at)."""
    if reply_to_message_id is not None:
        try:
            replied = store.messages.get(reply_to_message_id)
        except NotFound:
            replied = None
        if replied is None or store.forks.turn(conversation_id, replied.turn_id) is None:
            raise NotFound(f"message {reply_to_message_id} not found in this conversation")
        return replied.turn_id
    return latest_turn_id(store, conversation_id)


def follows_latest(
    store: Store, conversation_id: str, turn_id: str, parent_turn_id: str | None, conn: Connection
) -> bool:
    """Inside the write transaction that stores turn ``turn_id`` (after the store's lock): no
    other turn was stored since ``parent_turn_id`` was read as the conversation's latest, so the
    new turn continues from the newest one (a session's queued messages never fork off each
    other)."""
    others = store.turns.list(conversation_id, last=2, conn=conn)
    previous = [t.id for t in others if t.id != turn_id]
    return not previous or previous[-1] == parent_turn_id


class ConversationBusy(Exception):
    """The conversation has an active turn: its actor applies the policy (rolls back the ack)."""


class ParentMoved(Exception):
    """Another writer stored a turn after this one's parent was read: read the parent again."""


class Intake:
    """Acknowledges a user's message in the store when the conversation is idle there."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def acknowledge(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        message_id: str,
        source: MessageSource = "human",
        reply_to_message_id: str | None = None,
        agent_id: str | None = None,
    ) -> MessageAck | None:
        """Store the message and its (not yet started) turn and acknowledge them; ``None`` when
        the conversation is busy or its actor took the message first: ask the actor then.
        Refusals (a finished conversation, an unknown agent) raise as the actor's would."""
        store = self.store
        stored = existing_ack(store, conversation_id, message_id)
        if stored is not None:
            return stored
        parent_turn_id = parent_turn(store, conversation_id, reply_to_message_id)
        event = MessageReceived(
            turn_id=new_id_after("turn", parent_turn_id),
            message_id=message_id,
            content=content,
            author=author,
            caller=UserCaller(user_id=author),
            source=source,
            requested_agent_id=agent_id,
            reply_to_message_id=reply_to_message_id,
            parent_turn_id=parent_turn_id,
            policy_applies=True,
            at=utc_now(),
        )
        state = ConversationState(store.conversations.get(conversation_id))
        decisions = plan(state, event)
        raise_refusal(decisions)
        match decisions:
            case [BeginTurn(turn=planned, message=message), AssembleContext()]:
                marks: list[Decision] = []
            case [BeginTurn(turn=planned, message=message), AssembleContext(), MarkConversation()]:
                marks = decisions[2:]  # the author joins; a failed conversation is active again
            case _:
                return None  # not a plain start (an idle conversation has none): ask the actor
        turn = planned.model_copy(update={"started_at": None})
        writer = BatchWriter(store, conversation_id)
        writes = writer.writes_for([BeginTurn(turn, message), *marks])

        def only_turn(conn: Connection, _events: list[Event]) -> None:
            active = store.turns.list(conversation_id, status=TurnStatus.ACTIVE, conn=conn)
            if any(t.id != turn.id for t in active):
                raise ConversationBusy(conversation_id)
            # Another turn stored since the parent was read (it already ended): the actor takes
            # the message and continues from that one.
            if reply_to_message_id is None and not follows_latest(
                store, conversation_id, turn.id, turn.parent_turn_id, conn
            ):
                raise ConversationBusy(conversation_id)

        log = ConversationLog(store, conversation_id, lambda _event: None)
        try:
            log.commit(event.at, [*writes, PendingWrite([], only_turn)])
        except (ConversationBusy, IntegrityError):
            return None  # busy, or the actor stored this very message first
        numbered = writer.acks[turn.id]
        return MessageAck(
            conversation_id=conversation_id,
            turn_id=turn.id,
            message_id=numbered.id,
            seq=numbered.seq,
        )
