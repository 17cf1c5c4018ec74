"""Storage of stream tickets (``stream_tickets``): issued, then redeemed once.

Only a ticket's SHA-256 is stored, never the ticket. Redeeming deletes the row in the same
statement that finds it, so of two connections racing with one ticket exactly one gets it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, insert, select

from core.store import schema
from core.store.database import Database


class StreamTicket(BaseModel):
    """What a ticket opens: one conversation's stream, for one key (by its hash) and user."""

    model_config = ConfigDict(extra="forbid")

    client_id: str
    key_hash: str
    user_id: str | None
    conversation_id: str
    expires_at: datetime


class StreamTicketOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def issue(self, ticket_hash: str, ticket: StreamTicket, now: datetime) -> None:
        """Store a ticket (and drop tickets that expired before ``now``: nothing else does)."""
        t = schema.stream_tickets
        with self.db.begin() as c:
            c.execute(delete(t).where(t.c.expires_at < now.isoformat()))
            c.execute(
                insert(t).values(
                    ticket_hash=ticket_hash,
                    client_id=ticket.client_id,
                    key_hash=ticket.key_hash,
                    user_id=ticket.user_id,
                    conversation_id=ticket.conversation_id,
                    expires_at=ticket.expires_at.isoformat(),
                )
            )

    def redeem(self, ticket_hash: str) -> StreamTicket | None:
        """The ticket, removed: a second redemption finds nothing (None). Expiry is the
        caller's to check (an expired ticket is removed too)."""
        t = schema.stream_tickets
        with self.db.begin() as c:
            row = c.execute(select(t).where(t.c.ticket_hash == ticket_hash)).first()
            if row is None:
                return None
            gone = c.execute(delete(t).where(t.c.ticket_hash == ticket_hash)).rowcount
        if not gone:  # another connection redeemed it between the two statements
            return None
        return StreamTicket(
            client_id=row.client_id,
            key_hash=row.key_hash,
            user_id=row.user_id,
            conversation_id=row.conversation_id,
            expires_at=datetime.fromisoformat(row.expires_at),
        )
