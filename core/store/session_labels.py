"""Listing and deleting session labels (the ``sessions`` table; ``SessionOps`` reads and writes
one label)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from core.store import schema
from core.store.database import Database
from core.store.members import conversations_of


@dataclass(frozen=True)
class SessionRow:
    label: str
    conversation_id: str
    created_at: str


class SessionLabelOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, client_id: str, label: str) -> SessionRow | None:
        t = schema.sessions
        query = select(t.c.label, t.c.conversation_id, t.c.created_at).where(
            t.c.client_id == client_id, t.c.label == label
        )
        with self.db.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else SessionRow(row.label, row.conversation_id, row.created_at)

    def create(self, client_id: str, label: str, conversation_id: str, created_at: str) -> bool:
        """Insert the label; False when it exists already (whoever raced first keeps it)."""
        t = schema.sessions
        try:
            with self.db.begin() as conn:
                conn.execute(
                    insert(t).values(
                        client_id=client_id,
                        label=label,
                        conversation_id=conversation_id,
                        created_at=created_at,
                    )
                )
        except IntegrityError:
            return False
        return True

    def list(
        self, client_id: str, *, after: str | None, limit: int, member: str | None = None
    ) -> list[SessionRow]:
        """Labels in order after ``after``; with ``member``, only those naming a conversation
        that user is a member of."""
        t = schema.sessions
        query = select(t.c.label, t.c.conversation_id, t.c.created_at).where(
            t.c.client_id == client_id
        )
        if after is not None:
            query = query.where(t.c.label > after)
        if member is not None:
            query = query.where(t.c.conversation_id.in_(conversations_of(member)))
        with self.db.connect() as conn:
            rows = conn.execute(query.order_by(t.c.label).limit(limit)).all()
        return [SessionRow(r.label, r.conversation_id, r.created_at) for r in rows]

    def delete(self, client_id: str, label: str) -> bool:
        t = schema.sessions
        with self.db.begin() as conn:
            done = conn.execute(delete(t).where(t.c.client_id == client_id, t.c.label == label))
        return bool(done.rowcount)
