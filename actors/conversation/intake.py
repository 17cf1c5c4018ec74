"""Taking a message in: its parent turn, a retried message recognised, refusals, and the
acknowledgement a caller may write while no actor holds the conversation's log.

The actor takes messages in itself (``ConversationActor.post_message``). While no actor holds the
conversation's log — it is evicted, being started or re-activated (a second or more) —, whoever
received the message (the ``Conversations`` adapter in the gateway) acknowledges it here instead,
so a user gets ``202`` in milliseconds: the same planning (``plan(MessageReceived)`` on the
conversation as the store holds it), the same writes, one transaction, as a guest of the log
(``actors.conversation.log``: refused once an actor holds it, checked inside that transaction).
It does so only while the conversation has no active turn — checked in that transaction too — so
the concurrency policy has nothing to decide: the turn is stored acknowledged-but-not-started and
the actor starts it when it is activated (its start-up recovery), or when the caller's own message
reaches it (``post_message`` finds the message stored and picks its turn up). A turn whose
activation waits for room at the resident cap says so in the log (``turn.waiting``).
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
from actors.conversation.log import ConversationLog, LogOwned, PendingWrite
from actors.conversation.planning import plan
from actors.conversation.records import BatchWriter
from core.domain import Event, MessageSource, TurnStatus, UserCaller
from core.errors import Conflict, ErrorCode, InvalidInput, NonRetryableError, NotFound
from core.forks import latest_turn_id
from core.ids import new_id_after, utc_now
from core.jsontypes import JsonObject
from core.ports import EventListeners, MessageAck
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


class Intake:
    """Acknowledges a user's message in the store while no actor holds the conversation's log;
    what it writes is published to ``listeners``."""

    def __init__(self, store: Store, listeners: EventListeners | None = None) -> None:
        self.store = store
        self.listeners = listeners

    def _log(self, conversation_id: str) -> ConversationLog:
        listeners = self.listeners

        def publish(frame: JsonObject) -> None:
            if listeners is not None:
                listeners.publish(conversation_id, [frame])

        return ConversationLog(self.store, conversation_id, publish)

    def note_waiting(
        self, conversation_id: str, turn_id: str, reason: str, retry_after_s: float | None
    ) -> bool:
        """Record that the turn's activation waits for room at the resident cap (a
        ``turn.waiting`` event), unless an actor holds the log by now; whether it did."""
        payload: JsonObject = {"turn_id": turn_id, "reason": "capacity", "message": reason}
        if retry_after_s is not None:
            payload["retry_after_s"] = retry_after_s
        try:
            self._log(conversation_id).note(utc_now(), "turn.waiting", payload)
        except LogOwned:
            return False
        return True

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
        if store.writers.current(conversation_id).holder is not None:
            return None  # its actor holds the log: ask the actor
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

        try:
            self._log(conversation_id).commit(event.at, [*writes, PendingWrite([], only_turn)])
        except (ConversationBusy, IntegrityError, LogOwned):
            return None  # busy, the actor stored this very message first, or holds the log
        numbered = writer.acks[turn.id]
        return MessageAck(
            conversation_id=conversation_id,
            turn_id=turn.id,
            message_id=numbered.id,
            seq=numbered.seq,
        )
