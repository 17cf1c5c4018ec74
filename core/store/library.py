"""Versioned library objects, in libraries: the system's and each client's (issue 13).

The **system library** (``library_objects``) is what ships with Wonder (``wonder library apply``
without ``--client``); every client reads it and none may change it. A **client's library**
(``client_library_objects``) holds the objects that client stored; other clients never see them.

Lookups name whose object they mean: ``owner=`` one library (``SYSTEM`` or a client id), or
``client_id=`` a client's view: its own object with that id if it has one, else the system's.
So "the latest version" is only ever the client's own or the system's, never another client's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import (
    CompoundSelect,
    Connection,
    Table,
    and_,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
)

from core.errors import NotFound
from core.store import schema
from core.store.database import Database

M = TypeVar("M", bound=BaseModel)

SYSTEM = "system"


@dataclass(frozen=True, slots=True)
class Owned(Generic[M]):
    """A library object and whose library holds it (``SYSTEM`` or a client id)."""

    owner: str
    obj: M


class LibraryOps(Generic[M]):
    """Versioned library objects of one kind: each ``put`` adds a version, reads get the latest."""

    def __init__(self, db: Database, kind: str, model: type[M]) -> None:
        self.db = db
        self.kind = kind
        self.model = model

    # ------------------------------------------------------------------ where an owner's rows are

    @staticmethod
    def _table(owner: str) -> Table:
        return schema.library_objects if owner == SYSTEM else schema.client_library_objects

    def _where(self, owner: str, obj_id: str | None = None) -> list[Any]:
        t = self._table(owner)
        conditions: list[Any] = [t.c.kind == self.kind]
        if owner != SYSTEM:
            conditions.append(t.c.client_id == owner)
        if obj_id is not None:
            conditions.append(t.c.id == obj_id)
        return conditions

    # ------------------------------------------------------------------ writes

    def put(self, obj: M, created_at: datetime, *, owner: str = SYSTEM) -> M:
        """Store ``obj`` as the next version in ``owner``'s library; an identical latest version
        is not duplicated."""
        t = self._table(owner)
        obj_id: str = obj.id  # type: ignore[attr-defined]
        with self.db.begin() as c:
            latest = c.execute(
                select(t.c.version, t.c.data)
                .where(*self._where(owner, obj_id))
                .order_by(t.c.version.desc())
                .limit(1)
            ).first()
            if latest is not None:
                previous = self.model.model_validate_json(latest.data)
                if previous.model_copy(update={"version": 0}) == obj.model_copy(
                    update={"version": 0}
                ):
                    return previous
            version = (latest.version if latest else 0) + 1
            stored = obj.model_copy(update={"version": version})
            row = {
                "kind": self.kind,
                "id": obj_id,
                "version": version,
                "data": stored.model_dump_json(by_alias=True),
                "created_at": created_at.isoformat(),
            }
            if owner != SYSTEM:
                row["client_id"] = owner
            c.execute(insert(t).values(**row))
        return stored

    # ------------------------------------------------------------------ reads

    def owner_of(
        self, obj_id: str, client_id: str | None, conn: Connection | None = None
    ) -> str | None:
        """Whose ``obj_id`` a client means: its own if it has one, else the system's (None:
        neither has it). Without ``client_id``, only the system's."""
        candidates = [client_id, SYSTEM] if client_id is not None else [SYSTEM]
        with self._read(conn) as c:
            for owner in candidates:
                t = self._table(owner)
                query = select(t.c.version).where(*self._where(owner, obj_id)).limit(1)
                if c.execute(query).first() is not None:
                    return owner
        return None

    def find(
        self,
        obj_id: str,
        version: int | None = None,
        conn: Connection | None = None,
        *,
        client_id: str | None = None,
        owner: str | None = None,
    ) -> Owned[M]:
        """The object and its owner: in ``owner``'s library when given, else as ``client_id``
        sees it (its own, else the system's), else the system's. ``NotFound`` otherwise."""
        with self._read(conn) as c:
            resolved = owner if owner is not None else self.owner_of(obj_id, client_id, c)
            found = None
            if resolved is not None:
                t = self._table(resolved)
                query = select(t.c.data).where(*self._where(resolved, obj_id))
                query = (
                    query.where(t.c.version == version)
                    if version is not None
                    else query.order_by(t.c.version.desc()).limit(1)
                )
                found = c.execute(query).scalar_one_or_none()
        if found is None or resolved is None:
            suffix = f" version {version}" if version is not None else ""
            raise NotFound(f"{self.kind} {obj_id}{suffix} not found")
        return Owned(resolved, self.model.model_validate_json(found))

    def get(
        self,
        obj_id: str,
        version: int | None = None,
        conn: Connection | None = None,
        *,
        client_id: str | None = None,
        owner: str | None = None,
    ) -> M:
        """``find`` without the owner."""
        return self.find(obj_id, version, conn, client_id=client_id, owner=owner).obj

    def list_latest(self, client_id: str | None = None) -> list[M]:
        """The latest version of every object a client sees (the system's and its own), by id."""
        return [o.obj for o in self.list_owned(client_id)]

    def list_owned(self, client_id: str | None = None, limit: int | None = None) -> list[Owned[M]]:
        """``list_latest`` with each object's owner: the system's, then the client's (at most
        ``limit`` in all)."""
        owners = [SYSTEM] if client_id is None else [SYSTEM, client_id]
        found: list[Owned[M]] = []
        for owner in owners:
            left = None if limit is None else limit - len(found)
            if left is not None and left <= 0:
                break
            found += [Owned(owner, obj) for obj in self._latest_of(owner, left)]
        return found

    def _latest_of(self, owner: str, limit: int | None = None) -> list[M]:
        t = self._table(owner)
        latest = (
            select(t.c.id, func.max(t.c.version).label("v"))
            .where(*self._where(owner))
            .group_by(t.c.id)
            .subquery()
        )
        query = (
            select(t.c.data)
            .join(latest, and_(t.c.id == latest.c.id, t.c.version == latest.c.v))
            .where(*self._where(owner))
            .order_by(t.c.id)
            .limit(limit)
        )
        with self.db.connect() as c:
            return [self.model.model_validate_json(row) for row in c.execute(query).scalars()]

    def versions(self, obj_id: str, *, owner: str = SYSTEM) -> list[M]:
        """Every version of ``obj_id`` in ``owner``'s library, oldest first."""
        t = self._table(owner)
        query = select(t.c.data).where(*self._where(owner, obj_id)).order_by(t.c.version)
        with self.db.connect() as c:
            return [self.model.model_validate_json(row) for row in c.execute(query).scalars()]

    def _read(self, conn: Connection | None) -> Any:
        return nullcontext(conn) if conn is not None else self.db.connect()


@dataclass(frozen=True, slots=True)
class LatestVersion:
    """The newest version of one library object in one library."""

    owner: str
    kind: str
    id: str
    version: int


class LibraryVersions:
    """Which versions of named objects a client's library and the system's hold now, in one
    query: what a cache of library objects checks itself against (objects are only ever added
    as new versions, so an unchanged latest version means unchanged content)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def latest(self, client_id: str, refs: Iterable[tuple[str, str]]) -> list[LatestVersion]:
        """The latest version of each ``(kind, id)`` in ``client_id``'s library and in the
        system's; an object neither holds has no row."""
        wanted = tuple(sorted(set(refs)))
        if not wanted:
            return []
        with self.db.connect() as c:
            rows = c.execute(_latest_query(client_id, wanted)).all()
        return [LatestVersion(str(o), str(k), str(i), int(v)) for o, k, i, v in rows]


@functools.lru_cache(maxsize=256)
def _latest_query(client_id: str, wanted: tuple[tuple[str, str], ...]) -> CompoundSelect[Any]:
    """Built once per client and set of objects: building it costs 3 times running it (a cached
    setup asks the same question every turn)."""
    queries = []
    for owner in (SYSTEM, client_id):
        t = LibraryOps._table(owner)
        owned = [] if owner == SYSTEM else [t.c.client_id == owner]
        matches = or_(*(and_(t.c.kind == kind, t.c.id == obj_id) for kind, obj_id in wanted))
        queries.append(
            select(literal(owner), t.c.kind, t.c.id, func.max(t.c.version))
            .where(*owned, matches)
            .group_by(t.c.kind, t.c.id)
        )
    return union_all(*queries)
