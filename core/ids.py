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


def new_id_after(prefix: str, earlier: str | None) -> str:
    """A new id that sorts after ``earlier`` (one of the same prefix, perhaps made by another
    process in the same millisecond, where two processes' ULIDs order at random)."""
    made = new_id(prefix)
    if earlier is None or not earlier.startswith(f"{prefix}_") or made > earlier:
        return made
    after = ULID.from_int(int(ULID.from_str(earlier.removeprefix(f"{prefix}_"))) + 1)
    return f"{prefix}_{after}"


def utc_now() -> datetime:
    """The current time in UTC (the one clock the shell reads)."""
    return datetime.now(UTC)
