"""Storage of webhooks (the rules are in ``core.hooks``)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select

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
        t = schema.hooks
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.id == hook_id, t.c.client_id == client_id))
