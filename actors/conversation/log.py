"""The Conversation's durable log: entity writes and their events, one transaction per batch.

Each planning batch's writes (turns, messages, moves, operations, the conversation row) and the
events that announce them commit together; ``seq`` numbers are allocated by the store inside that
transaction. Events are published only after the commit, so a subscriber never sees something the
store could lose; subscribers are reached by ``publish`` (the processes listening to the
conversation), never through the conversation's actor.

One writer at a time (docs/architecture.md, "Who writes a conversation's log"): whoever creates
a conversation writes its first events with its row; from then on every append goes through
``ConversationLog.commit``, which checks the conversation's writer lease inside the appending
transaction. The conversation's actor holds the lease while it is resident (``Owner``: its epoch;
a former incarnation is refused, ``WriterFenced``). A writer without the actor (``GUEST``: the
gateway's intake, the async-operations runner) appends only while no actor holds it
(``LogOwned`` otherwise: ask the actor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from core.conversations import started_event
from core.domain import (
    AgentCaller,
    Conversation,
    Event,
    Message,
    MessageRole,
    Participant,
    Turn,
)
from core.errors import ErrorCode, RetryableError
from core.event_order import event_frame, token_frame
from core.ids import new_id
from core.jsontypes import JsonObject
from core.store import Store
from core.store.writers import WriterLease, lock_conversation
from core.tracing import TraceContext

Publish = Callable[[JsonObject], None]
Write = Callable[[Connection, list[Event]], None]


@dataclass(frozen=True, slots=True)
class Owner:
    """The conversation's actor, holding the lease taken at ``epoch``."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Guest:
    """A writer without the actor: appends only while nobody holds the lease."""


GUEST = Guest()
Writer = Owner | Guest


class LogOwned(Exception):
    """A guest tried to append while the conversation's actor holds its log: ask the actor."""


class WriterFenced(RetryableError):
    """This actor's lease was taken by a newer incarnation (or given up): it may not append."""

    code = ErrorCode.UNAVAILABLE


def check_writer(writer: Writer, lease: WriterLease) -> None:
    """Raise unless ``writer`` may append under ``lease`` (read in the appending transaction)."""
    match writer:
        case Owner(epoch=epoch):
            if lease.holder is None or lease.epoch != epoch:
                raise WriterFenced(
                    f"conversation {lease.conversation_id}: this actor's lease (epoch {epoch}) is "
                    f"no longer held (epoch {lease.epoch}, holder {lease.holder})"
                )
        case Guest():
            if lease.holder is not None:
                raise LogOwned(lease.conversation_id)


@dataclass
class PendingEvent:
    type: str
    payload: JsonObject = field(default_factory=dict)


@dataclass
class PendingWrite:
    """Rows to write and the events that announce them; ``write`` gets those events numbered."""

    events: list[PendingEvent]
    write: Write | None = None


def event_dict(event: Event) -> JsonObject:
    """The wire form of an event: ``{seq, type, at, conversation_id, **payload}``."""
    return event_frame(event)


def token_event(conversation_id: str, turn_id: str, delta: str) -> JsonObject:
    """A streamed token delta (not stored: ``seq`` None)."""
    return token_frame(conversation_id, turn_id, delta)


def turn_payload(turn: Turn) -> JsonObject:
    return {
        "turn_id": turn.id,
        "status": turn.status.value,
        "failure_reason": turn.failure_reason,
        "issues": turn.issues.model_dump(),
        "usage": turn.usage.model_dump(),
    }


class ConversationLog:
    """Appends to one conversation's log as ``writer``: numbers events, checks the lease,
    publishes after the commit."""

    def __init__(
        self, store: Store, conversation_id: str, publish: Publish, writer: Writer = GUEST
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.publish = publish
        self.writer = writer

    def commit(self, at: datetime, writes: Sequence[PendingWrite]) -> list[Event]:
        """Run every write and append every event in one transaction, then publish the events."""
        stored: list[Event] = []
        with self.store.db.begin() as conn:
            lock_conversation(self.conversation_id, conn)
            check_writer(self.writer, self.store.writers.current(self.conversation_id, conn))
            # A write with no event (a settled memory extraction) takes no number.
            numbering = any(pending.events for pending in writes)
            seq = self.store.events.next_seq(self.conversation_id, conn) if numbering else 0
            for pending in writes:
                numbered = [
                    Event(
                        conversation_id=self.conversation_id,
                        seq=seq + n,
                        type=e.type,
                        payload=e.payload,
                        at=at,
                    )
                    for n, e in enumerate(pending.events)
                ]
                seq += len(numbered)
                if pending.write is not None:
                    pending.write(conn, numbered)
                stored += numbered
            for event in stored:
                self.store.events.append(event, conn)
        for event in stored:
            self.publish(event_dict(event))
        return stored

    def note(self, at: datetime, event_type: str, payload: JsonObject) -> None:
        """A durable event with no entity write."""
        self.commit(at, [PendingWrite([PendingEvent(event_type, payload)])])

    def last_seq(self) -> int:
        return self.store.events.last_seq(self.conversation_id)


def create_child_conversation(
    store: Store,
    *,
    parent: Conversation,
    child_id: str,
    workplace: tuple[str | None, str | None],
    agent_id: str,
    participants: list[Participant],
    title: str,
    started_by_message_id: str | None,
    content: str,
    caller: AgentCaller,
    session_label: str,
    at: datetime,
    user_id: str | None = None,
    trace: TraceContext | None = None,
) -> str:
    """A delegated child conversation created atomically with its first message (seed 003).

    One transaction writes the conversation (``child_id``, working on ``workplace``: its
    ``(project_id, branch)``, see ``core.projects.child_workplace``), its ``conversation_started``
    event, the first turn (not yet started: the child's actor starts it), the message and their
    events, the sub-agent session label that lets a later call resume it, and the trace the turn
    joins (``trace``: the delegating span's; written before the child's actor exists, which
    may start the turn as soon as it is activated). Returns the turn's id.
    """
    child = Conversation(
        id=child_id,
        client_id=parent.client_id,
        agent_id=agent_id,
        participants=participants,
        title=title,
        started_by_conversation_id=parent.id,
        started_by_message_id=started_by_message_id,
        depth=parent.depth + 1,
        project_id=workplace[0],
        branch=workplace[1],
        created_at=at,
    )
    turn = Turn(
        id=new_id("turn"),
        conversation_id=child.id,
        agent_id=agent_id,
        caller=caller,
        user_id=user_id,
        input=content,
        source="agent",
        created_at=at,
    )
    message = Message(
        id=new_id("msg"),
        conversation_id=child.id,
        turn_id=turn.id,
        role=MessageRole.USER,
        author=caller.agent_id,
        content=content,
        source="agent",
        seq=3,
        created_at=at,
    )
    events = [
        started_event(child),
        Event(
            conversation_id=child.id, seq=2, type="turn.started", payload=turn_payload(turn), at=at
        ),
        Event(
            conversation_id=child.id,
            seq=3,
            type="message",
            payload={"message": message.model_dump(mode="json")},
            at=at,
        ),
    ]
    with store.db.begin() as conn:
        store.conversations.insert(child, conn)
        store.turns.insert(turn, conn)
        store.messages.insert(message, conn)
        for event in events:
            store.events.append(event, conn)
        store.sessions.put(parent.client_id, session_label, child.id, at, conn)
        store.members.copy(parent.id, child.id, at, conn)  # the parent's users keep access
        if trace is not None:
            store.records.put_trace(turn.id, trace.trace_id, trace.span_id, conn)
    return turn.id
