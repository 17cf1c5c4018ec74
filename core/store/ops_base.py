"""The base of every store operations class: one database, and a connection per call.

Every method of an operations class takes an optional ``conn`` so a caller can group writes in one
transaction (``with store.db.begin() as conn: ...``); without it each call opens its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection

from core.store.database import Database


class StoreOps:
    """Operations over one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @contextmanager
    def _write(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's connection, or a write transaction of its own (committed on exit)."""
        if conn is not None:
            yield conn
        else:
            with self.db.begin() as own:
                yield own

    @contextmanager
    def _read(self, conn: Connection | None = None) -> Iterator[Connection]:
        """The caller's connection, or a read connection of its own."""
        if conn is not None:
            yield conn
        else:
            with self.db.connect() as own:
                yield own
