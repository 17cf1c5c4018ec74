"""Storage of the memory extractions still to run for completed turns (``pending_extractions``)."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select

from core.domain import PendingExtraction
from core.store import schema
from core.store.database import Database


class PendingExtractionOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, pending: PendingExtraction, conn: Connection) -> None:
        """Record ``pending`` inside the caller's transaction (the turn's completion)."""
        conn.execute(
            insert(schema.pending_extractions).values(
                conversation_id=pending.conversation_id,
                turn_id=pending.turn_id,
                data=pending.model_dump_json(),
            )
        )

    def remove(self, conversation_id: str, turn_id: str, conn: Connection) -> None:
        t = schema.pending_extractions
        conn.execute(
            delete(t).where(t.c.conversation_id == conversation_id, t.c.turn_id == turn_id)
        )

    def list(self, conversation_id: str) -> list[PendingExtraction]:
        """The conversation's pending extractions, oldest turn first."""
        t = schema.pending_extractions
        query = select(t.c.data).where(t.c.conversation_id == conversation_id).order_by(t.c.turn_id)
        with self.db.connect() as conn:
            return [PendingExtraction.model_validate_json(r) for r in conn.execute(query).scalars()]
