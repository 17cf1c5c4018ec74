"""Engine creation: SQLite tuned for many actor processes, or any SQLAlchemy URL."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, update
from sqlalchemy.exc import InterfaceError, OperationalError, ProgrammingError

from core.errors import Unavailable
from core.store.columns import add_missing_columns
from core.store.schema import SCHEMA_VERSION, metadata, schema_info

FINGERPRINT_ROW = 2  # the ``schema_info`` row holding the fingerprint of the schema migrated to


def fingerprint() -> int:
    """A number that changes whenever ``schema.py`` gains a table or a column."""
    shape = ";".join(
        f"{table.name}:{','.join(column.name for column in table.columns)}"
        for table in metadata.sorted_tables
    )
    return zlib.crc32(shape.encode()) & 0x7FFFFFFF  # fits a signed 32-bit column


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the one writer; busy_timeout makes writers from other actor
    # processes wait for the lock instead of failing; NORMAL sync is durable across process
    # crashes (the case we guard against), only an OS crash can lose the last commits.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _begin_sqlite(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get("wonder_write") else "BEGIN")


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """Connections one process may hold to a server database (PostgreSQL).

    Each Wonder process (a conversation actor, a coordinator, an executor worker, a gateway
    replica) has one engine. Actors call the store from their event loop thread, one statement
    at a time, so they hold one connection, kept open between calls (``size``); ``overflow``
    covers the few places that open a second one inside a transaction and the gateway's thread
    pool. A process never holds more than ``size + overflow``; a caller past that waits up to
    ``timeout_s`` and then fails with a retryable error instead of opening more. So N resident
    actors keep about N connections open and never more than N * (size + overflow); see
    docs/deploy.md for sizing PostgreSQL's ``max_connections`` (or a PgBouncer in front).
    """

    size: int = 1
    overflow: int = 4
    timeout_s: float = 30.0
    recycle_s: int = 1800


# SQLite reports its own mistakes (no such table, a syntax error) as OperationalError too: only
# these mean "not now" there; every OperationalError of a server database does (lost connection,
# refused connect, a deadlock or cancelled statement).
SQLITE_UNAVAILABLE = ("locked", "unable to open", "disk i/o")


@contextmanager
def _unavailable_as_retryable(url: str) -> Iterator[None]:
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        reason = str(exc.orig or exc)
        if url.startswith("sqlite") and not any(s in reason.lower() for s in SQLITE_UNAVAILABLE):
            raise
        raise Unavailable(f"the database is unavailable: {reason[:300]}") from exc


def _connect_args(url: str) -> dict[str, Any]:
    # A server that does not answer fails the connect in seconds instead of hanging an actor.
    if url.startswith(("postgresql", "postgres")):
        return {"connect_timeout": 10, "application_name": "wonder"}
    return {}


class Database:
    """One engine per process; ``begin()`` yields a connection inside a transaction."""

    def __init__(self, url: str, pool: PoolLimits | None = None) -> None:
        self.url = url
        self.pool = pool or PoolLimits()
        self.engine: Engine = self._create_engine(url, self.pool)
        self.migrate()

    @staticmethod
    def _create_engine(url: str, pool: PoolLimits) -> Engine:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
            event.listen(engine, "connect", _tune_sqlite)
            # A write transaction starts with BEGIN IMMEDIATE: it takes the write lock up front, so
            # two processes never deadlock upgrading a read transaction to a write one. Reads use
            # a plain (deferred) BEGIN: under WAL they never wait for writers.
            event.listen(engine, "begin", _begin_sqlite)
            event.listen(
                engine,
                "connect",
                lambda dbapi_conn, _r: setattr(dbapi_conn, "isolation_level", None),
            )
            return engine
        return create_engine(
            url,
            pool_pre_ping=True,  # a server restart or an idle timeout costs a reconnect, not a turn
            pool_size=pool.size,
            max_overflow=pool.overflow,
            pool_timeout=pool.timeout_s,
            pool_recycle=pool.recycle_s,
            connect_args=_connect_args(url),
        )

    def migrate(self) -> None:
        """Create missing tables and record the schema version (idempotent, safe to race).

        Skipped when the database says it was migrated to this very schema (its fingerprint):
        every process opens the store (each conversation actor's start does), and a migration
        holds the database's write lock — SQLite's is every writer's — while it inspects each
        table."""
        if self._migrated():
            return
        with self.begin() as conn:  # one write transaction: concurrent starters serialise here
            metadata.create_all(conn, checkfirst=True)
            add_missing_columns(conn, metadata)
            row = conn.execute(select(schema_info.c.version)).first()
            if row is None:
                conn.execute(insert(schema_info).values(id=1, version=SCHEMA_VERSION))
            mark = schema_info.c.id == FINGERPRINT_ROW
            if conn.execute(select(schema_info.c.version).where(mark)).first() is None:
                conn.execute(insert(schema_info).values(id=FINGERPRINT_ROW, version=fingerprint()))
            else:
                conn.execute(update(schema_info).where(mark).values(version=fingerprint()))

    def _migrated(self) -> bool:
        """Whether the database was migrated to this schema (a read: no lock taken)."""
        query = select(schema_info.c.version).where(schema_info.c.id == FINGERPRINT_ROW)
        try:
            with self.connect() as conn:
                found = conn.execute(query).scalar_one_or_none()
        except (OperationalError, ProgrammingError):  # no schema_info yet: a new database
            return False
        return found == fingerprint()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction (committed on exit, rolled back on error).

        A database that cannot be reached or drops the connection (a server stopped or
        restarting) raises ``Unavailable``, a retryable error: nothing of the transaction was
        written, and the caller may try again once the server is back.
        """
        with _unavailable_as_retryable(self.url), self.engine.connect() as conn:
            conn.info["wonder_write"] = True
            try:
                with conn.begin():
                    yield conn
            finally:
                conn.info["wonder_write"] = False

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reads (its implicit transaction never takes the write lock)."""
        with _unavailable_as_retryable(self.url), self.engine.connect() as conn:
            conn.info["wonder_write"] = False
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()
