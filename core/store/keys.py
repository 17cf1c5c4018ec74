"""Storage of API keys (``api_keys``): add, find by secret, list, revoke, expire. No rules here:
``core.keys`` says what a key may do and ``serving.gateway.keys`` who may change one."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from core.errors import NotFound
from core.keys import KEY_ID_HEX, ApiKey, KeyScope, hash_key, key_id_for_hash
from core.store import schema
from core.store.database import Database

KEY_ID_PATTERN = rf"^key_[0-9a-f]{{{KEY_ID_HEX}}}$"


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _key(row: Any) -> ApiKey:
    created = _when(row.created_at)
    assert created is not None
    return ApiKey(
        id=key_id_for_hash(row.key_hash),
        client_id=row.client_id,
        name=row.name,
        scope=KeyScope(row.scope) if row.scope else KeyScope.ADMIN,
        created_at=created,
        expires_at=_when(row.expires_at),
        revoked_at=_when(row.revoked_at),
    )


class KeyOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        client_id: str,
        secret: str,
        created_at: datetime,
        *,
        name: str | None = None,
        scope: KeyScope = KeyScope.ADMIN,
        expires_at: datetime | None = None,
        conn: Connection | None = None,
    ) -> ApiKey:
        values = {
            "key_hash": hash_key(secret),
            "client_id": client_id,
            "created_at": _ts(created_at),
            "name": name,
            "scope": scope.value,
            "expires_at": _ts(expires_at),
            "revoked_at": None,
        }
        if conn is None:
            with self.db.begin() as own:
                own.execute(insert(schema.api_keys).values(**values))
        else:
            conn.execute(insert(schema.api_keys).values(**values))
        return self.by_hash(hash_key(secret), conn)

    def find(self, secret: str) -> ApiKey | None:
        """The key whose secret is ``secret`` (revoked and expired ones included)."""
        try:
            return self.by_hash(hash_key(secret))
        except NotFound:
            return None

    def by_hash(self, key_hash: str, conn: Connection | None = None) -> ApiKey:
        t = schema.api_keys
        query = select(t).where(t.c.key_hash == key_hash)
        row = self._one(query, conn)
        if row is None:
            raise NotFound("API key not found")
        return _key(row)

    def by_hashes(self, hashes: Iterable[str]) -> dict[str, ApiKey]:
        """Keys by their hashes (unknown ones are left out)."""
        t = schema.api_keys
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        with self.db.connect() as c:
            rows = c.execute(select(t).where(t.c.key_hash.in_(wanted))).all()
        return {row.key_hash: _key(row) for row in rows}

    def get(self, key_id: str, client_id: str | None = None) -> ApiKey:
        """The key ``key_id``; ``NotFound`` for an unknown id or another client's key."""
        row = self._row_for_id(key_id, client_id)
        return _key(row)

    def list(self, client_id: str | None = None) -> list[ApiKey]:
        """Keys oldest first; one client's when ``client_id`` is given."""
        t = schema.api_keys
        query = select(t)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self.db.connect() as c:
            rows = c.execute(query.order_by(t.c.created_at, t.c.key_hash)).all()
        return [_key(row) for row in rows]

    def revoke(self, key_id: str, at: datetime, conn: Connection | None = None) -> ApiKey:
        """Mark the key revoked at ``at`` (a key already revoked keeps its first time)."""
        return self._set(key_id, conn, revoked_at=at, only_if_unset="revoked_at")

    def expire(self, key_id: str, at: datetime, conn: Connection | None = None) -> ApiKey:
        """Make the key expire at ``at`` (or keep its earlier expiry)."""
        current = self.get(key_id)
        if current.expires_at is not None and current.expires_at <= at:
            return current
        return self._set(key_id, conn, expires_at=at)

    def _set(
        self,
        key_id: str,
        conn: Connection | None,
        *,
        only_if_unset: str | None = None,
        **values: datetime,
    ) -> ApiKey:
        row = self._row_for_id(key_id, None, conn)
        t = schema.api_keys
        statement = update(t).where(t.c.key_hash == row.key_hash)
        if only_if_unset is not None:
            statement = statement.where(t.c[only_if_unset].is_(None))
        stored = {name: _ts(value) for name, value in values.items()}
        if conn is None:
            with self.db.begin() as own:
                own.execute(statement.values(**stored))
        else:
            conn.execute(statement.values(**stored))
        return self.by_hash(row.key_hash, conn)

    def _row_for_id(
        self, key_id: str, client_id: str | None, conn: Connection | None = None
    ) -> Any:
        if not re.match(KEY_ID_PATTERN, key_id):
            raise NotFound(f"key {key_id} not found")
        t = schema.api_keys
        query = select(t).where(t.c.key_hash.startswith(key_id.removeprefix("key_")))
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        row = self._one(query, conn)
        if row is None:
            raise NotFound(f"key {key_id} not found")
        return row

    def _one(self, query: Any, conn: Connection | None) -> Any:
        if conn is not None:
            return conn.execute(query).first()
        with self.db.connect() as c:
            return c.execute(query).first()
