"""The relational store: SQLAlchemy Core (SQLite or PostgreSQL), one ops class per entity."""

from core.store.database import Database
from core.store.operations import Store

__all__ = ["Database", "Store"]
