"""The audit trail: who changed what, when and from where. Append-only.

Who: the client, the API key (its public id) and the acting user (``X-Wonder-User``) when one was
named; from where: the client's address as the gateway saw it (``core.client_address``). Entries
recorded before these fields existed have them null.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Select, insert, or_, select

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
    key_id: str | None = Field(None, description="The API key that acted (its public id)")
    user_id: str | None = Field(None, description="The acting user (X-Wonder-User), if any")
    address: str | None = Field(
        None, description="The client's address as the gateway saw it (docs/security.md)"
    )
    action: str = Field(description="What: library.put, key.create, quota.set, ...")
    target: str = Field(description="Which object: 'personas:assistant', 'client:<id>'")
    subject_client_id: str | None = Field(None, description="The client the change is about")
    details: JsonObject = Field(default_factory=dict, description="What changed")


@dataclass(frozen=True)
class AuditFilter:
    """Which entries to list; every field left None matches everything.

    ``action`` matches one action (``key.revoke``) or, ending in a dot, a family (``key.``).
    """

    client_id: str | None = None
    action: str | None = None
    target: str | None = None
    key_id: str | None = None
    user_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


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
                    action=entry.action,
                    key_id=entry.key_id,
                    user_id=entry.user_id,
                    target=entry.target[:300],
                    at=entry.at.astimezone(UTC).isoformat(),
                )
            )
        return entry

    def list(
        self,
        client_id: str | None = None,
        *,
        after: str | None = None,
        limit: int = 100,
        where: AuditFilter | None = None,
    ) -> list[AuditEntry]:
        """Entries oldest first after the ``after`` id; ``client_id`` keeps those it made or is
        the subject of (None: every entry); ``where`` narrows further."""
        t = schema.audit_log
        query = select(t.c.data)
        if client_id is not None:
            query = query.where(or_(t.c.client_id == client_id, t.c.subject_client_id == client_id))
        if after is not None:
            query = query.where(t.c.id > after)
        if where is not None:
            query = _narrow(query, where)
        with self.db.connect() as c:
            rows = c.execute(query.order_by(t.c.id).limit(limit)).scalars()
            return [AuditEntry.model_validate_json(r) for r in rows]


def _narrow(query: Select[tuple[str]], where: AuditFilter) -> Select[tuple[str]]:
    t = schema.audit_log
    if where.client_id is not None:
        query = query.where(
            or_(t.c.client_id == where.client_id, t.c.subject_client_id == where.client_id)
        )
    if where.action is not None:
        if where.action.endswith("."):
            query = query.where(t.c.action.startswith(where.action, autoescape=True))
        else:
            query = query.where(t.c.action == where.action)
    for column, value in (
        (t.c.target, where.target),
        (t.c.key_id, where.key_id),
        (t.c.user_id, where.user_id),
    ):
        if value is not None:
            query = query.where(column == value)
    # ``at`` is ISO 8601 in UTC, so it orders as text.
    if where.since is not None:
        query = query.where(t.c.at >= where.since.astimezone(UTC).isoformat())
    if where.until is not None:
        query = query.where(t.c.at < where.until.astimezone(UTC).isoformat())
    return query


def changed_fields(before: BaseModel | None, after: BaseModel) -> list[str]:
    """Top-level fields whose values differ (all of them when there was nothing before)."""
    new = after.model_dump(mode="json", exclude={"version"})
    if before is None:
        return sorted(new)
    old = before.model_dump(mode="json", exclude={"version"})
    return sorted(k for k in new.keys() | old.keys() if new.get(k) != old.get(k))
