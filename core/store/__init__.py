"""The relational store: SQLAlchemy Core (SQLite or PostgreSQL), one ops class per entity."""

from __future__ import annotations

from functools import lru_cache

from core.settings import Settings, settings_from_env
from core.store.database import Database, PoolLimits
from core.store.operations import Store

__all__ = ["Database", "PoolLimits", "Store", "open_store", "store_for_settings"]


@lru_cache(maxsize=8)
def _store_for(url: str, pool: PoolLimits) -> Store:
    return Store.open(url, pool)


def store_for_settings(settings: Settings) -> Store:
    """This process's store for ``settings`` (one engine per database URL)."""
    pool = PoolLimits(size=settings.database_pool_size, overflow=settings.database_pool_overflow)
    return _store_for(settings.resolved_database_url, pool)


def open_store(settings_env: dict[str, str] | None = None) -> Store:
    """The store named by ``settings_env`` (``WONDER_*`` variables), or by this process's env."""
    return store_for_settings(settings_from_env(settings_env))
