"""Storage of who may append to a conversation's log now (``conversation_writers``).

A conversation's actor takes the lease when it binds (each activation raises ``epoch``) and
releases it when it hibernates; while no one holds it, a writer without the actor may append (see
``actors.conversation.log``). Every check runs inside the appending transaction, after the
conversation is locked there (SQLite: the write transaction's database lock; PostgreSQL: the
conversation's row, as ``EventOps.next_seq`` takes it), so a take and an append never interleave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from core.store import schema
from core.store.database import Database


@dataclass(frozen=True, slots=True)
class WriterLease:
    """A conversation's lease as stored: ``holder`` None means nobody holds it."""

    conversation_id: str
    epoch: int = 0
    holder: str | None = None


def lock_conversation(conversation_id: str, conn: Connection) -> None:
    """Serialise this transaction with every other writer of the conversation (PostgreSQL locks
    its row; a SQLite write transaction already holds the database's write lock)."""
    if conn.dialect.name != "sqlite":
        conversations = schema.conversations
        conn.execute(
            select(conversations.c.id)
            .where(conversations.c.id == conversation_id)
            .with_for_update()
        )


class WriterLeaseOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def current(self, conversation_id: str, conn: Connection | None = None) -> WriterLease:
        """The lease as stored now (inside ``conn``'s transaction when given)."""
        t = schema.conversation_writers
        query = select(t.c.epoch, t.c.holder).where(t.c.conversation_id == conversation_id)
        if conn is not None:
            row = conn.execute(query).first()
        else:
            with self.db.connect() as c:
                row = c.execute(query).first()
        if row is None:
            return WriterLease(conversation_id)
        return WriterLease(conversation_id, int(row.epoch), row.holder)

    def held(self, conversation_ids: Sequence[str]) -> set[str]:
        """Which of these conversations' leases are held now (one read)."""
        t = schema.conversation_writers
        query = select(t.c.conversation_id).where(
            t.c.conversation_id.in_(list(conversation_ids)), t.c.holder.is_not(None)
        )
        with self.db.connect() as c:
            return set(c.execute(query).scalars())

    def take(self, conversation_id: str, holder: str, at: datetime) -> int:
        """Hold the lease from now on, whoever held it before; returns the new epoch (the
        former holder's appends are refused from here on)."""
        t = schema.conversation_writers
        with self.db.begin() as conn:
            lock_conversation(conversation_id, conn)
            epoch = self.current(conversation_id, conn).epoch + 1
            values = {"epoch": epoch, "holder": holder[:200], "since": at.isoformat()}
            changed = conn.execute(
                update(t).where(t.c.conversation_id == conversation_id).values(**values)
            ).rowcount
            if not changed:
                conn.execute(insert(t).values(conversation_id=conversation_id, **values))
        return epoch

    def release(self, conversation_id: str, epoch: int, at: datetime) -> bool:
        """Give the lease up if ``epoch`` still holds it; whether it did."""
        t = schema.conversation_writers
        with self.db.begin() as conn:
            lock_conversation(conversation_id, conn)
            released = conn.execute(
                update(t)
                .where(
                    t.c.conversation_id == conversation_id,
                    t.c.epoch == epoch,
                    t.c.holder.is_not(None),
                )
                .values(holder=None, since=at.isoformat())
            ).rowcount
        return bool(released)
