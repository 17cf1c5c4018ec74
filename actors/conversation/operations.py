"""The Conversation's durable log: entity writes and their events, one transaction each.

The actor is the only writer of its conversation's events, so it numbers them itself (``seq``);
a failed transaction gives the numbers back, keeping the sequence gap-free. Every write commits
before its events are published, so a subscriber never sees something the store could lose.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from core.domain import (
    AgentCaller,
    AsyncOperation,
    Conversation,
    Event,
    Message,
    MessageRole,
    Move,
    Participant,
    Turn,
)
from core.ids import new_id, utc_now
from core.store import Store

JsonObject = dict[str, Any]
Publish = Callable[[JsonObject], None]


@dataclass
class PendingEvent:
    type: str
    payload: JsonObject = field(default_factory=dict)


def event_dict(event: Event) -> JsonObject:
    """The wire form of an event: ``{seq, type, at, conversation_id, **payload}``."""
    return {
        "seq": event.seq,
        "type": event.type,
        "at": event.at.isoformat(),
        "conversation_id": event.conversation_id,
        **event.payload,
    }


class ConversationLog:
    """Writes one conversation's entities and events, numbering events and publishing them."""

    def __init__(self, store: Store, conversation_id: str, publish: Publish) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.publish = publish
        self.seq = store.events.last_seq(conversation_id)

    def commit(
        self,
        at: datetime,
        events: list[PendingEvent],
        writes: Callable[[Connection, list[Event]], None] | None = None,
    ) -> list[Event]:
        """Run ``writes`` and append ``events`` in one transaction, then publish the events."""
        first = self.seq
        stored = [
            Event(
                conversation_id=self.conversation_id,
                seq=first + n + 1,
                type=e.type,
                payload=e.payload,
                at=at,
            )
            for n, e in enumerate(events)
        ]
        try:
            with self.store.db.begin() as conn:
                if writes is not None:
                    writes(conn, stored)
                for event in stored:
                    self.store.events.append(event, conn)
        except BaseException:
            self.seq = first
            raise
        self.seq = first + len(stored)
        for event in stored:
            self.publish(event_dict(event))
        return stored

    def begin_turn(self, turn: Turn, message: Message) -> Message:
        """Persist a new turn and its input message; returns the message with its seq."""
        numbered = message

        def writes(conn: Connection, events: list[Event]) -> None:
            nonlocal numbered
            numbered = message.model_copy(update={"seq": events[1].seq})
            events[1].payload["message"] = numbered.model_dump(mode="json")
            self.store.turns.insert(turn, conn)
            self.store.messages.insert(numbered, conn)

        self.commit(
            turn.created_at,
            [PendingEvent("turn.started", _turn_payload(turn)), PendingEvent("message")],
            writes,
        )
        return numbered

    def append_message(
        self,
        message: Message,
        extra: list[Move] | None = None,
        delivered: AsyncOperation | None = None,
    ) -> Message:
        """Append an agent message, with its moves and the delivery it completes, atomically."""
        numbered = message
        moves = extra or []

        def writes(conn: Connection, events: list[Event]) -> None:
            nonlocal numbered
            for move in moves:
                self.store.moves.insert(move, conn)
            if delivered is not None:
                self.store.operations.save(delivered, conn)
            numbered = message.model_copy(update={"seq": events[-1].seq})
            events[-1].payload["message"] = numbered.model_dump(mode="json")
            self.store.messages.insert(numbered, conn)

        events = [PendingEvent("move", {"move": m.model_dump(mode="json")}) for m in moves]
        if delivered is not None:
            events.append(
                PendingEvent(
                    "operation.delivered",
                    {"turn_id": delivered.turn_id, "operation_id": delivered.id},
                )
            )
        self.commit(message.created_at, [*events, PendingEvent("message")], writes)
        return numbered

    def save_turn(self, turn: Turn, event_type: str, extra: JsonObject | None = None) -> None:
        payload = {**_turn_payload(turn), **(extra or {})}
        at = turn.completed_at or turn.created_at
        self.commit(
            at,
            [PendingEvent(event_type, payload)],
            lambda conn, _events: self.store.turns.save(turn, conn),
        )

    def record_moves(self, moves: list[Move], extra_events: list[PendingEvent]) -> None:
        def writes(conn: Connection, _events: list[Event]) -> None:
            for move in moves:
                self.store.moves.insert(move, conn)

        events = [PendingEvent("move", {"move": m.model_dump(mode="json")}) for m in moves]
        self.commit(moves[0].created_at, [*events, *extra_events], writes)

    def note(self, at: datetime, event_type: str, payload: JsonObject) -> None:
        """A durable event with no entity write (errors, lifecycle)."""
        self.commit(at, [PendingEvent(event_type, payload)])


def _turn_payload(turn: Turn) -> JsonObject:
    return {
        "turn_id": turn.id,
        "status": turn.status.value,
        "failure_reason": turn.failure_reason,
        "issues": turn.issues.model_dump(),
        "usage": turn.usage.model_dump(),
    }


def create_child_conversation(
    store: Store,
    *,
    parent: Conversation,
    agent_id: str,
    participants: list[Participant],
    title: str,
    started_by_message_id: str | None,
    content: str,
    caller: AgentCaller,
    session_label: str,
) -> tuple[str, str]:
    """A delegated child conversation created atomically with its first message (seed 003).

    One transaction writes the conversation, its ``conversation_started`` event, the first turn
    (not yet started: the child's actor starts it), the message and their events, and the
    sub-agent session label that lets a later call resume it. Returns ``(conversation_id,
    turn_id)``.
    """
    from core.conversations import started_event

    now = utc_now()
    child = Conversation(
        id=new_id("conv"),
        client_id=parent.client_id,
        agent_id=agent_id,
        participants=participants,
        title=title,
        started_by_conversation_id=parent.id,
        started_by_message_id=started_by_message_id,
        depth=parent.depth + 1,
        created_at=now,
    )
    turn = Turn(
        id=new_id("turn"),
        conversation_id=child.id,
        agent_id=agent_id,
        caller=caller,
        input=content,
        source="agent",
        created_at=now,
    )
    message = Message(
        id=new_id("msg"),
        conversation_id=child.id,
        turn_id=turn.id,
        role=MessageRole.USER,
        author=caller.agent_id,
        content=content,
        seq=3,
        created_at=now,
    )
    events = [
        started_event(child),
        Event(
            conversation_id=child.id,
            seq=2,
            type="turn.started",
            payload=_turn_payload(turn),
            at=now,
        ),
        Event(
            conversation_id=child.id,
            seq=3,
            type="message",
            payload={"message": message.model_dump(mode="json")},
            at=now,
        ),
    ]
    with store.db.begin() as conn:
        store.conversations.insert(child, conn)
        store.turns.insert(turn, conn)
        store.messages.insert(message, conn)
        for event in events:
            store.events.append(event, conn)
        store.sessions.put(parent.client_id, session_label, child.id, now, conn)
    return child.id, turn.id
