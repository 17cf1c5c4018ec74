"""Opaque, sortable identifiers (ULIDs) and UTC timestamps.

Only effectful code calls these; planning receives ids and times inside its events.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ulid import ULID


def new_id(prefix: str = "") -> str:
    """A new ULID, optionally prefixed (``"conv_01J..."``), sortable by creation time."""
    value = str(ULID())
    return f"{prefix}_{value}" if prefix else value


def utc_now() -> datetime:
    """The current time in UTC (the one clock the shell reads)."""
    return datetime.now(UTC)
