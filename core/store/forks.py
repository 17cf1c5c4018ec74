"""Storage of forks and of what a conversation sees: its own entries plus those a fork inherits.

A fork does not copy its source's rows: it records a *lineage*, the segments of other
conversations it sees, root first. A segment is ``(conversation, last turn, last seq)``: the
entries written in that conversation with ``seq <= last_seq`` (what was stored when the fork was
made) that belong to turns up to ``last_turn_id`` (turn ids are ULIDs: creation order). The fork's
own events are numbered after its last segment's ``last_seq``, so seqs rise along the lineage and
one ``seq`` orders (and pages) inherited and own entries together.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, TypeAdapter
from sqlalchemy import Connection, and_, delete, func, insert, or_, select
from sqlalchemy.sql.elements import ColumnElement

from core.domain import Conversation, Event, Message, Turn
from core.store import schema
from core.store.members import conversations_of
from core.store.ops_base import StoreOps


class Segment(BaseModel):
    """Entries of ``conversation_id`` a fork inherits (see the module docstring)."""

    conversation_id: str
    last_turn_id: str
    last_seq: int


LINEAGE = TypeAdapter(list[Segment])


@dataclass(frozen=True)
class Seen:
    """One visible entry: ``inherited_from`` is the conversation it was written in, or None."""

    inherited_from: str | None


@dataclass(frozen=True)
class Span:
    """One conversation's part of a visible history: its turns up to ``last_turn_id`` and seqs up
    to ``last_seq`` (None: all of them, the conversation's own part)."""

    conversation_id: str
    last_turn_id: str | None
    last_seq: int | None
    inherited: bool

    @property
    def seen(self) -> Seen:
        return Seen(self.conversation_id if self.inherited else None)

    def turn_visible(self, turn_id: str | None) -> bool:
        return turn_id is None or self.last_turn_id is None or turn_id <= self.last_turn_id


def spans(conversation_id: str, lineage: Sequence[Segment]) -> list[Span]:
    """The parts of ``conversation_id``'s visible history, oldest (lowest seqs) first."""
    inherited = [
        Span(s.conversation_id, s.last_turn_id, s.last_seq, inherited=True) for s in lineage
    ]
    return [*inherited, Span(conversation_id, None, None, inherited=False)]


def _event_turn(event: Event) -> str | None:
    turn_id = event.payload.get("turn_id")
    if isinstance(turn_id, str):
        return turn_id
    message = event.payload.get("message")
    if isinstance(message, dict) and isinstance(message.get("turn_id"), str):
        return str(message["turn_id"])
    return None


class ForkOps(StoreOps):
    """Fork rows, and reads of a conversation's visible history (inherited entries marked)."""

    # ------------------------------------------------------------------ fork rows

    def insert(self, fork: Conversation, lineage: Sequence[Segment], conn: Connection) -> None:
        assert fork.forked_from_conversation_id and fork.forked_at_turn_id
        conn.execute(
            insert(schema.forks).values(
                conversation_id=fork.id,
                client_id=fork.client_id,
                source_conversation_id=fork.forked_from_conversation_id,
                forked_at_turn_id=fork.forked_at_turn_id,
                created_at=fork.created_at.isoformat(),
                lineage=LINEAGE.dump_json(list(lineage)).decode(),
            )
        )

    def lineage(self, conversation_id: str, conn: Connection | None = None) -> list[Segment]:
        """The segments ``conversation_id`` inherits, root first (empty for a non-fork)."""
        t = schema.forks
        query = select(t.c.lineage).where(t.c.conversation_id == conversation_id)
        with self._read(conn) as c:
            found = c.execute(query).scalar_one_or_none()
        return [] if found is None else LINEAGE.validate_json(found)

    def forks_of(
        self,
        source_id: str,
        client_id: str,
        *,
        limit: int,
        after: tuple[str, str] | None = None,
        member: str | None = None,
    ) -> list[Conversation]:
        """Forks made from ``source_id``, ordered by (created_at, id), after an optional cursor;
        with ``member``, only those that user is a member of."""
        f, c = schema.forks, schema.conversations
        query = (
            select(c.c.data)
            .join(f, f.c.conversation_id == c.c.id)
            .where(f.c.source_conversation_id == source_id, c.c.client_id == client_id)
        )
        if after is not None:
            created, last_id = after
            query = query.where(
                or_(c.c.created_at > created, and_(c.c.created_at == created, c.c.id > last_id))
            )
        if member is not None:
            query = query.where(c.c.id.in_(conversations_of(member)))
        query = query.order_by(c.c.created_at, c.c.id).limit(limit)
        with self.db.connect() as conn:
            return [Conversation.model_validate_json(r) for r in conn.execute(query).scalars()]

    def tree(self, root_id: str, client_id: str) -> list[str]:
        """Every fork whose lineage starts at ``root_id`` (a fork tree: the root's forks, their
        forks, ...), the root itself not included."""
        t = schema.forks
        prefix = LINEAGE.dump_json([Segment(conversation_id=root_id, last_turn_id="", last_seq=0)])
        head = prefix.decode().split(',"last_turn_id"')[0]  # '[{"conversation_id":"<root>"'
        query = select(t.c.conversation_id, t.c.lineage).where(
            t.c.client_id == client_id, t.c.lineage.like(head.replace("%", "") + ",%")
        )
        with self.db.connect() as conn:
            rows = conn.execute(query).all()
        return [
            fork_id
            for fork_id, lineage in rows
            if LINEAGE.validate_json(lineage)[0].conversation_id == root_id
        ]

    def dependents(self, conversation_ids: Sequence[str]) -> list[str]:
        """Forks outside ``conversation_ids`` that inherit from any of them."""
        t = schema.forks
        inside = set(conversation_ids)
        if not inside:
            return []
        query = select(t.c.conversation_id, t.c.lineage).where(
            or_(*(t.c.lineage.contains(f'"{c}"') for c in inside))
        )
        with self.db.connect() as conn:
            rows = conn.execute(query).all()
        return sorted(
            row.conversation_id
            for row in rows
            if row.conversation_id not in inside
            and any(s.conversation_id in inside for s in LINEAGE.validate_json(row.lineage))
        )

    def inheriting(self, conversation_id: str, turn_id: str) -> list[str]:
        """Forks that see ``turn_id`` of ``conversation_id`` (through any depth of forking)."""
        t = schema.forks
        query = select(t.c.conversation_id, t.c.lineage).where(
            t.c.lineage.contains(f'"{conversation_id}"')
        )
        with self.db.connect() as conn:
            rows = conn.execute(query).all()
        return [
            row.conversation_id
            for row in rows
            if any(
                s.conversation_id == conversation_id and turn_id <= s.last_turn_id
                for s in LINEAGE.validate_json(row.lineage)
            )
        ]

    def made_at(self, turn_id: str) -> bool:
        """Whether a fork was made at ``turn_id``."""
        t = schema.forks
        with self.db.connect() as conn:
            found = conn.execute(
                select(t.c.conversation_id).where(t.c.forked_at_turn_id == turn_id).limit(1)
            ).first()
        return found is not None

    def delete(self, conversation_ids: Sequence[str], conn: Connection) -> None:
        t = schema.forks
        conn.execute(delete(t).where(t.c.conversation_id.in_(list(conversation_ids))))

    # ------------------------------------------------------------------ visible history

    def spans(self, conversation_id: str, conn: Connection | None = None) -> list[Span]:
        return spans(conversation_id, self.lineage(conversation_id, conn))

    def turns(self, conversation_id: str) -> list[tuple[Turn, Seen]]:
        """Every visible turn in creation order."""
        t = schema.turns
        found: list[tuple[Turn, Seen]] = []
        with self.db.connect() as conn:
            for span in self.spans(conversation_id, conn):
                query = select(t.c.data).where(t.c.conversation_id == span.conversation_id)
                if span.last_turn_id is not None:
                    query = query.where(t.c.id <= span.last_turn_id)
                seen = span.seen
                found += [
                    (Turn.model_validate_json(r), seen)
                    for r in conn.execute(query.order_by(t.c.id)).scalars()
                ]
        return sorted(found, key=lambda pair: pair[0].id)

    def turn(self, conversation_id: str, turn_id: str) -> tuple[Turn, Seen] | None:
        """One turn if it is visible in ``conversation_id``."""
        t = schema.turns
        with self.db.connect() as conn:
            found = conn.execute(select(t.c.data).where(t.c.id == turn_id)).scalar_one_or_none()
            if found is None:
                return None
            turn = Turn.model_validate_json(found)
            for span in self.spans(conversation_id, conn):
                if span.conversation_id == turn.conversation_id and span.turn_visible(turn.id):
                    return turn, span.seen
        return None

    def messages(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int = 1000,
        newest_first: bool = False,
        turn_ids: Sequence[str] | None = None,
    ) -> list[tuple[Message, Seen]]:
        """Visible messages with ``after_seq < seq < before_seq``, in seq order (or newest first),
        at most ``limit``."""
        t = schema.messages
        with self.db.connect() as conn:
            parts = self.spans(conversation_id, conn)
            clauses: list[ColumnElement[bool]] = []
            for span in parts:
                clause = t.c.conversation_id == span.conversation_id
                if span.last_seq is not None:
                    clause = and_(clause, t.c.seq <= span.last_seq)
                if span.last_turn_id is not None:
                    clause = and_(clause, t.c.turn_id <= span.last_turn_id)
                clauses.append(clause)
            query = select(t.c.data).where(or_(*clauses), t.c.seq > after_seq)
            if before_seq is not None:
                query = query.where(t.c.seq < before_seq)
            if turn_ids is not None:
                query = query.where(t.c.turn_id.in_(list(turn_ids)))
            order = t.c.seq.desc() if newest_first else t.c.seq
            rows = conn.execute(query.order_by(order).limit(limit)).scalars()
            messages = [Message.model_validate_json(r) for r in rows]
        inherited = {s.conversation_id for s in parts if s.inherited}
        return [
            (m, Seen(m.conversation_id if m.conversation_id in inherited else None))
            for m in messages
        ]

    def message_counts(self, conversation_id: str) -> tuple[int, int]:
        """How many messages the conversation shows: ``(its own, inherited)``."""
        t = schema.messages
        own = inherited = 0
        with self.db.connect() as conn:
            for span in self.spans(conversation_id, conn):
                query = select(func.count()).where(t.c.conversation_id == span.conversation_id)
                if span.last_seq is not None:
                    query = query.where(t.c.seq <= span.last_seq)
                if span.last_turn_id is not None:
                    query = query.where(t.c.turn_id <= span.last_turn_id)
                n = int(conn.execute(query).scalar_one())
                if span.inherited:
                    inherited += n
                else:
                    own += n
        return own, inherited

    def events(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int = 1000,
        newest_first: bool = False,
    ) -> list[tuple[Event, Seen]]:
        """Visible durable events with ``after_seq < seq < before_seq``, in seq order (or newest
        first), at most ``limit``."""
        found: list[tuple[Event, Seen]] = []
        with self.db.connect() as conn:
            parts = self.spans(conversation_id, conn)
            for span in reversed(parts) if newest_first else parts:
                for event in self._span_events(conn, span, after_seq, before_seq, newest_first):
                    if span.turn_visible(_event_turn(event)):
                        found.append((event, span.seen))
                        if len(found) >= limit:
                            return found
        return found

    def _span_events(
        self,
        conn: Connection,
        span: Span,
        after_seq: int,
        before_seq: int | None,
        newest_first: bool,
        batch: int = 500,
    ) -> Iterator[Event]:
        t = schema.events
        low, high = after_seq, before_seq
        if span.last_seq is not None:
            high = span.last_seq + 1 if high is None else min(high, span.last_seq + 1)
        while True:
            query = select(t.c.data).where(
                t.c.conversation_id == span.conversation_id, t.c.seq > low
            )
            if high is not None:
                query = query.where(t.c.seq < high)
            order = t.c.seq.desc() if newest_first else t.c.seq
            rows = [
                Event.model_validate_json(r)
                for r in conn.execute(query.order_by(order).limit(batch)).scalars()
            ]
            yield from rows
            if len(rows) < batch:
                return
            if newest_first:
                high = rows[-1].seq
            else:
                low = rows[-1].seq
