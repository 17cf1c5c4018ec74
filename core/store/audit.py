"""The audit trail: who changed what, when (library objects, keys, quotas). Append-only."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import insert, or_, select

from core.jsontypes import JsonObject
from core.store import schema
from core.store.database import Database


class AuditEntry(BaseModel):
    """One recorded change."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Sortable by time (a ULID)")
    at: datetime
    actor: str = Field(description="Who: 'client:<id>' (an API key's client) or 'cli:<user>'")
    client_id: str | None = Field(None, description="The acting client, when a key acted")
    action: str = Field(description="What: library.put, key.create, quota.set")
    target: str = Field(description="Which object: 'persona:assistant', 'client:<id>'")
    subject_client_id: str | None = Field(None, description="The client the change is about")
    details: JsonObject = Field(default_factory=dict, description="What changed")


class AuditOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, entry: AuditEntry) -> AuditEntry:
        with self.db.begin() as c:
            c.execute(
                insert(schema.audit_log).values(
                    id=entry.id,
                    client_id=entry.client_id,
                    subject_client_id=entry.subject_client_id,
                    data=entry.model_dump_json(),
                )
            )
        return entry

    def list(
        self, client_id: str | None = None, *, after: str | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """Entries oldest first after the ``after`` id; ``client_id`` keeps those it made or is
        the subject of (None: every entry)."""
        t = schema.audit_log
        query = select(t.c.data)
        if client_id is not None:
            query = query.where(or_(t.c.client_id == client_id, t.c.subject_client_id == client_id))
        if after is not None:
            query = query.where(t.c.id > after)
        with self.db.connect() as c:
            rows = c.execute(query.order_by(t.c.id).limit(limit)).scalars()
            return [AuditEntry.model_validate_json(r) for r in rows]


def changed_fields(before: BaseModel | None, after: BaseModel) -> list[str]:
    """Top-level fields whose values differ (all of them when there was nothing before)."""
    new = after.model_dump(mode="json", exclude={"version"})
    if before is None:
        return sorted(new)
    old = before.model_dump(mode="json", exclude={"version"})
    return sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k))
