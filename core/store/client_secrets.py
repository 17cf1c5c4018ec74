"""Client secrets as stored: one row per (client, name), the value sealed (``core.client_secrets``).

No business rules here: sealing, opening and auditing are ``core.secret_vault``'s. Reading a
secret's metadata never reads its sealed value.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update

from core.client_secrets import SecretMeta
from core.errors import NotFound
from core.store import schema
from core.store.database import Database


@dataclass(frozen=True)
class SealedSecret:
    """A stored secret: its metadata and its sealed value (never leaves the vault)."""

    meta: SecretMeta
    key_id: str
    sealed: str


class ClientSecretOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def list(
        self, client_id: str, *, after: str | None = None, limit: int = 100
    ) -> list[SecretMeta]:
        """The client's secrets by name, after ``after``."""
        t = schema.client_secrets
        query = select(t.c.data).where(t.c.client_id == client_id)
        if after is not None:
            query = query.where(t.c.name > after)
        with self.db.connect() as c:
            rows = c.execute(query.order_by(t.c.name).limit(limit)).scalars()
            return [SecretMeta.model_validate_json(r) for r in rows]

    def meta(self, client_id: str, name: str) -> SecretMeta:
        t = schema.client_secrets
        query = select(t.c.data).where(t.c.client_id == client_id, t.c.name == name)
        with self.db.connect() as c:
            found = c.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"secret {name} not found")
        return SecretMeta.model_validate_json(found)

    def sealed(self, client_id: str, name: str) -> SealedSecret:
        t = schema.client_secrets
        query = select(t.c.data, t.c.key_id, t.c.sealed).where(
            t.c.client_id == client_id, t.c.name == name
        )
        with self.db.connect() as c:
            row = c.execute(query).one_or_none()
        if row is None:
            raise NotFound(f"secret {name} not found")
        return SealedSecret(SecretMeta.model_validate_json(row.data), row.key_id, row.sealed)

    def insert(self, client_id: str, meta: SecretMeta, key_id: str, sealed: str) -> bool:
        """Store version 1; False when the name exists already (a racing writer)."""
        values = self._values(meta, key_id, sealed)
        with self.db.begin() as c:
            exists = c.execute(
                select(schema.client_secrets.c.name).where(
                    schema.client_secrets.c.client_id == client_id,
                    schema.client_secrets.c.name == meta.name,
                )
            ).first()
            if exists is not None:
                return False
            c.execute(insert(schema.client_secrets).values(client_id=client_id, **values))
        return True

    def replace(
        self, client_id: str, meta: SecretMeta, key_id: str, sealed: str, *, previous: int
    ) -> bool:
        """Store a new version over ``previous``; False when another writer got there first."""
        t = schema.client_secrets
        with self.db.begin() as c:
            changed = c.execute(
                update(t)
                .where(t.c.client_id == client_id, t.c.name == meta.name, t.c.version == previous)
                .values(**self._values(meta, key_id, sealed))
            ).rowcount
        return bool(changed)

    def delete(self, client_id: str, name: str) -> bool:
        t = schema.client_secrets
        with self.db.begin() as c:
            gone = c.execute(delete(t).where(t.c.client_id == client_id, t.c.name == name))
        return bool(gone.rowcount)

    @staticmethod
    def _values(meta: SecretMeta, key_id: str, sealed: str) -> dict[str, object]:
        return {
            "name": meta.name,
            "version": meta.version,
            "key_id": key_id,
            "sealed": sealed,
            "data": meta.model_dump_json(),
        }
