"""Engine creation: SQLite tuned for many actor processes, or any SQLAlchemy URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select

from core.store.schema import SCHEMA_VERSION, metadata, schema_info


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


class Database:
    """One engine per process; ``begin()`` yields a connection inside a transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = self._create_engine(url)
        self.migrate()

    @staticmethod
    def _create_engine(url: str) -> Engine:
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
        return create_engine(url, pool_pre_ping=True)

    def migrate(self) -> None:
        """Create missing tables and record the schema version (idempotent, safe to race)."""
        with self.begin() as conn:  # one write transaction: concurrent starters serialise here
            metadata.create_all(conn, checkfirst=True)
            row = conn.execute(select(schema_info.c.version)).first()
            if row is None:
                conn.execute(insert(schema_info).values(id=1, version=SCHEMA_VERSION))

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction (committed on exit, rolled back on error)."""
        with self.engine.connect() as conn:
            conn.info["wonder_write"] = True
            try:
                with conn.begin():
                    yield conn
            finally:
                conn.info["wonder_write"] = False

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection for reads (its implicit transaction never takes the write lock)."""
        with self.engine.connect() as conn:
            conn.info["wonder_write"] = False
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()
