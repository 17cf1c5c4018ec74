"""Secrets the server generates once and shares between its processes (e.g. the key that signs
page cursors, so any gateway replica verifies a cursor another one issued)."""

from __future__ import annotations

import secrets

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from core.store import schema
from core.store.database import Database


class SecretOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get_or_create(self, name: str) -> bytes:
        """The secret ``name``; made (32 random bytes) by the first caller, whoever races."""
        t = schema.server_secrets
        query = select(t.c.value).where(t.c.name == name)
        with self.db.connect() as conn:
            found = conn.execute(query).scalar_one_or_none()
        if found is None:
            try:
                with self.db.begin() as conn:
                    conn.execute(insert(t).values(name=name, value=secrets.token_hex(32)))
            except IntegrityError:
                pass  # another process made it first: read theirs
            with self.db.connect() as conn:
                found = conn.execute(query).scalar_one()
        return bytes.fromhex(found)
