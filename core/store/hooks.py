"""Storage of webhooks (the rules are in ``core.hooks``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from core.errors import NotFound
from core.hook_model import Hook
from core.store import schema
from core.store.database import Database


class HookOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, hook: Hook) -> Hook:
        with self.db.begin() as conn:
            conn.execute(
                insert(schema.hooks).values(
                    id=hook.id, client_id=hook.client_id, data=hook.model_dump_json()
                )
            )
        return hook

    def get(self, hook_id: str, client_id: str | None = None) -> Hook:
        t = schema.hooks
        query = select(t.c.data).where(t.c.id == hook_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self.db.connect() as conn:
            found = conn.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"hook {hook_id} not found")
        return Hook.model_validate_json(found)

    def for_client(self, client_id: str) -> list[Hook]:
        t = schema.hooks
        query = select(t.c.data).where(t.c.client_id == client_id).order_by(t.c.id)
        with self.db.connect() as conn:
            return [Hook.model_validate_json(r) for r in conn.execute(query).scalars()]

    def delete(self, hook_id: str, client_id: str) -> None:
        t, d = schema.hooks, schema.hook_deliveries
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.id == hook_id, t.c.client_id == client_id))
            conn.execute(delete(d).where(d.c.hook_id == hook_id))

    def claim_delivery(
        self, hook_id: str, signature: str, expires_at: datetime, now: datetime
    ) -> tuple[bool, str | None]:
        """Record a delivery by its signature until ``expires_at``: ``(True, None)`` when this is
        its first time, else ``(False, result)`` with what the first one recorded (None while
        it is still being posted). Deliveries of this hook past their expiry go first."""
        d = schema.hook_deliveries
        with self.db.begin() as conn:
            conn.execute(delete(d).where(d.c.hook_id == hook_id, d.c.expires_at < now.isoformat()))
        try:
            with self.db.begin() as conn:
                conn.execute(
                    insert(d).values(
                        hook_id=hook_id, signature=signature, expires_at=expires_at.isoformat()
                    )
                )
            return True, None
        except IntegrityError:
            query = select(d.c.result).where(d.c.hook_id == hook_id, d.c.signature == signature)
            with self.db.connect() as conn:
                return False, conn.execute(query).scalar_one_or_none()

    def record_delivery(self, hook_id: str, signature: str, result: str) -> None:
        """What the delivery led to (a repeat is answered with it)."""
        d = schema.hook_deliveries
        with self.db.begin() as conn:
            conn.execute(
                update(d)
                .where(d.c.hook_id == hook_id, d.c.signature == signature)
                .values(result=result)
            )

    def release_delivery(self, hook_id: str, signature: str) -> None:
        """Forget a delivery whose post failed, so that the sender's retry is taken."""
        d = schema.hook_deliveries
        with self.db.begin() as conn:
            conn.execute(delete(d).where(d.c.hook_id == hook_id, d.c.signature == signature))
