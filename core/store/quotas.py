"""Storage for issue 17: per-client quotas, operator (admin) keys, and what quotas count.

The counts (active turns, stored conversations, the day's model tokens) are read from the store
the rest of Wonder writes, so every gateway replica sees the same figures.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import delete, func, insert, select

from core.domain import Turn, TurnStatus
from core.quotas import Quota
from core.store import schema
from core.store.database import Database


def _hash(key: str) -> str:

    return hashlib.sha256(key.encode()).hexdigest()


class QuotaOps:
    """A client's ``Quota`` (absent: unlimited) and the usage figures quotas are checked on."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, client_id: str) -> Quota | None:
        t = schema.quotas
        with self.db.connect() as c:
            found = c.execute(select(t.c.data).where(t.c.client_id == client_id))
            data = found.scalar_one_or_none()
        return None if data is None else Quota.model_validate_json(data)

    def put(self, client_id: str, quota: Quota, at: datetime) -> Quota:
        t = schema.quotas
        with self.db.begin() as c:
            c.execute(delete(t).where(t.c.client_id == client_id))
            c.execute(
                insert(t).values(
                    client_id=client_id,
                    updated_at=at.isoformat(),
                    data=quota.model_dump_json(exclude_none=True),
                )
            )
        return quota

    def conversations(self, client_id: str) -> int:
        """How many conversations ``client_id`` has stored."""
        t = schema.conversations
        with self.db.connect() as c:
            query = select(func.count()).select_from(t).where(t.c.client_id == client_id)
            return int(c.execute(query).scalar_one())

    def active_turns(self, client_id: str) -> int:
        """How many of ``client_id``'s turns are active (across its conversations)."""
        turns, convs = schema.turns, schema.conversations
        query = (
            select(func.count())
            .select_from(turns.join(convs, turns.c.conversation_id == convs.c.id))
            .where(convs.c.client_id == client_id, turns.c.status == TurnStatus.ACTIVE.value)
        )
        with self.db.connect() as c:
            return int(c.execute(query).scalar_one())

    def tokens_since(self, client_id: str, since: datetime) -> int:
        """Model tokens (prompt + completion) of ``client_id``'s turns created since ``since``."""
        turns, convs = schema.turns, schema.conversations
        query = (
            select(turns.c.data)
            .select_from(turns.join(convs, turns.c.conversation_id == convs.c.id))
            .where(convs.c.client_id == client_id, turns.c.created_at >= since.isoformat())
        )
        total = 0
        with self.db.connect() as c:
            for data in c.execute(query).scalars():
                usage = Turn.model_validate_json(data).usage
                total += usage.prompt_tokens + usage.completion_tokens
        return total


class AdminKeyOps:
    """Operator keys: an API key listed here may set quotas and read every audit entry."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, key: str, at: datetime) -> None:
        with self.db.begin() as c:
            c.execute(
                insert(schema.admin_keys).values(key_hash=_hash(key), created_at=at.isoformat())
            )

    def is_admin(self, key: str) -> bool:
        t = schema.admin_keys
        with self.db.connect() as c:
            found = c.execute(select(t.c.key_hash).where(t.c.key_hash == _hash(key)))
            return found.scalar_one_or_none() is not None
