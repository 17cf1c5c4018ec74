"""Storage of cron triggers and of the due times fired (``core.triggers`` holds the rules)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from core.errors import NotFound
from core.store import schema
from core.store.database import Database
from core.trigger_model import CronTrigger


class TriggerOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, trigger: CronTrigger) -> CronTrigger:
        t = schema.cron_triggers
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.id == trigger.id))
            conn.execute(
                insert(t).values(
                    id=trigger.id,
                    client_id=trigger.client_id,
                    next_due=trigger.next_due.isoformat(),
                    data=trigger.model_dump_json(),
                )
            )
        return trigger

    def get(self, trigger_id: str, client_id: str | None = None) -> CronTrigger:
        t = schema.cron_triggers
        query = select(t.c.data).where(t.c.id == trigger_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self.db.connect() as conn:
            found = conn.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"trigger {trigger_id} not found")
        return CronTrigger.model_validate_json(found)

    def for_client(self, client_id: str, limit: int | None = None) -> list[CronTrigger]:
        t = schema.cron_triggers
        query = select(t.c.data).where(t.c.client_id == client_id).order_by(t.c.id).limit(limit)
        with self.db.connect() as conn:
            return [CronTrigger.model_validate_json(r) for r in conn.execute(query).scalars()]

    def due(self, now: datetime, limit: int = 100) -> list[CronTrigger]:
        t = schema.cron_triggers
        query = select(t.c.data).where(t.c.next_due <= now.isoformat()).order_by(t.c.next_due)
        with self.db.connect() as conn:
            rows = conn.execute(query.limit(limit)).scalars()
            return [CronTrigger.model_validate_json(r) for r in rows]

    def claim(self, trigger: CronTrigger, following: datetime) -> bool:
        """Record ``trigger.next_due`` as fired and move the trigger to ``following``, in one
        transaction; False when that due time was fired already (by this or an earlier run)."""
        t, fires = schema.cron_triggers, schema.trigger_fires
        moved = trigger.model_copy(update={"next_due": following})
        try:
            with self.db.begin() as conn:
                conn.execute(
                    insert(fires).values(trigger_id=trigger.id, due_at=trigger.next_due.isoformat())
                )
                conn.execute(
                    update(t)
                    .where(t.c.id == trigger.id)
                    .values(next_due=following.isoformat(), data=moved.model_dump_json())
                )
        except IntegrityError:
            return False
        return True

    def advance(self, trigger: CronTrigger, following: datetime) -> None:
        """Move the trigger to ``following`` (its due time was fired already)."""
        t = schema.cron_triggers
        moved = trigger.model_copy(update={"next_due": following})
        with self.db.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.id == trigger.id)
                .values(next_due=following.isoformat(), data=moved.model_dump_json())
            )

    def fired(self, trigger_id: str) -> list[str]:
        """The due times fired, oldest first."""
        f = schema.trigger_fires
        query = select(f.c.due_at).where(f.c.trigger_id == trigger_id).order_by(f.c.due_at)
        with self.db.connect() as conn:
            return list(conn.execute(query).scalars())

    def delete(self, trigger_id: str, client_id: str) -> None:
        t, f = schema.cron_triggers, schema.trigger_fires
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.id == trigger_id, t.c.client_id == client_id))
            conn.execute(delete(f).where(f.c.trigger_id == trigger_id))
