"""The store tier: the same tests on SQLite and on a real PostgreSQL server (no Ray here).

``store_url`` is parametrised over both backends: a SQLite file in the test's tmp dir, or a fresh
database on the session's PostgreSQL server (``tests/postgres.py``, started once, torn down after).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'wonder.db'}"
    server: Any = request.getfixturevalue("postgres_server")
    return str(server.create_database())


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = Store.open(store_url)
    try:
        yield opened
    finally:
        opened.db.dispose()
