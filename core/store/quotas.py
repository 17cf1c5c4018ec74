"""Storage for issue 17: per-client and per-user quotas, operator (admin) keys, and what quotas
count.

The counts (active turns, stored conversations, the day's model tokens) are read from the store
the rest of Wonder writes, so every gateway replica and conversation actor sees the same figures.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, insert, or_, select

from core.domain import Turn, TurnStatus
from core.quotas import Quota, UserQuota
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

    def get_user(self, client_id: str, user_id: str) -> UserQuota | None:
        t = schema.user_quotas
        query = select(t.c.data).where(t.c.client_id == client_id, t.c.user_id == user_id)
        with self.db.connect() as c:
            data = c.execute(query).scalar_one_or_none()
        return None if data is None else UserQuota.model_validate_json(data)

    def put_user(self, client_id: str, user_id: str, quota: UserQuota, at: datetime) -> UserQuota:
        t = schema.user_quotas
        with self.db.begin() as c:
            c.execute(delete(t).where(t.c.client_id == client_id, t.c.user_id == user_id))
            c.execute(
                insert(t).values(
                    client_id=client_id,
                    user_id=user_id,
                    updated_at=at.isoformat(),
                    data=quota.model_dump_json(exclude_none=True),
                )
            )
        return quota

    def delete_user(self, client_id: str, user_id: str) -> bool:
        """Clear a user's quota; False when it had none."""
        t = schema.user_quotas
        with self.db.begin() as c:
            gone = c.execute(delete(t).where(t.c.client_id == client_id, t.c.user_id == user_id))
            return bool(gone.rowcount)

    def users_with_quotas(self, client_id: str) -> list[str]:
        """The users of ``client_id`` that have a quota of their own."""
        t = schema.user_quotas
        with self.db.connect() as c:
            query = select(t.c.user_id).where(t.c.client_id == client_id).order_by(t.c.user_id)
            return [str(u) for u in c.execute(query).scalars()]

    def conversations(self, client_id: str) -> int:
        """How many conversations ``client_id`` has stored."""
        t = schema.conversations
        with self.db.connect() as c:
            query = select(func.count()).select_from(t).where(t.c.client_id == client_id)
            return int(c.execute(query).scalar_one())

    def active_runs(self, client_id: str) -> int:
        """How many workflow runs of ``client_id`` are pending or running."""
        t = schema.workflow_runs
        live = t.c.status.in_(["pending", "running"])
        with self.db.connect() as c:
            query = select(func.count()).select_from(t).where(t.c.client_id == client_id, live)
            return int(c.execute(query).scalar_one())

    def triggers(self, client_id: str) -> int:
        """How many cron triggers ``client_id`` has stored."""
        t = schema.cron_triggers
        with self.db.connect() as c:
            query = select(func.count()).select_from(t).where(t.c.client_id == client_id)
            return int(c.execute(query).scalar_one())

    def turn_usage(
        self,
        client_id: str,
        user_id: str | None,
        since: datetime | None,
        excluding: str | None = None,
    ) -> TurnUsage:
        """Active turns and model tokens since ``since`` (None: tokens not asked for, only active
        turns are read) of ``client_id``, and of its turns that work for ``user_id``, in one
        read; the turn ``excluding`` (the one being checked) left out. A turn's tokens count
        once it records them (when it ends, or answers and awaits operations)."""
        turns, convs = schema.turns, schema.conversations
        active = turns.c.status == TurnStatus.ACTIVE.value
        day = since.isoformat() if since is not None else None
        query = (
            select(turns.c.id, turns.c.status, turns.c.created_at, turns.c.data)
            .select_from(turns.join(convs, turns.c.conversation_id == convs.c.id))
            .where(
                convs.c.client_id == client_id,
                active if day is None else or_(active, turns.c.created_at >= day),
            )
        )
        usage = TurnUsage()
        with self.db.connect() as c:
            for turn_id, status, created_at, data in c.execute(query):
                if turn_id == excluding:
                    continue
                turn = Turn.model_validate_json(data)
                today = day is not None and created_at >= day
                usage = usage.add(
                    active=status == TurnStatus.ACTIVE.value,
                    tokens=turn.usage.prompt_tokens + turn.usage.completion_tokens if today else 0,
                    of_user=user_id is not None and turn.user_id == user_id,
                )
        return usage


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What turn quotas count, for a client and for one of its users."""

    active_turns: int = 0
    tokens: int = 0
    user_active_turns: int = 0
    user_tokens: int = 0

    def add(self, *, active: bool, tokens: int, of_user: bool) -> TurnUsage:
        return TurnUsage(
            self.active_turns + active,
            self.tokens + tokens,
            self.user_active_turns + (active and of_user),
            self.user_tokens + (tokens if of_user else 0),
        )


class AdminKeyOps:
    """Operator keys: an API key listed here may set quotas and read every audit entry."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, key: str, at: datetime) -> None:
        with self.db.begin() as c:
            c.execute(
                insert(schema.admin_keys).values(key_hash=_hash(key), created_at=at.isoformat())
            )

    def key_hashes(self) -> set[str]:
        """The hashes of every operator key (a key's id is derived from its hash)."""
        with self.db.connect() as c:
            return {str(h) for h in c.execute(select(schema.admin_keys.c.key_hash)).scalars()}

    def is_admin(self, key: str) -> bool:
        t = schema.admin_keys
        with self.db.connect() as c:
            found = c.execute(select(t.c.key_hash).where(t.c.key_hash == _hash(key)))
            return found.scalar_one_or_none() is not None
