"""Storage of scheduled memory upkeep entries (``core.memory_upkeep`` holds the rules)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert, select, update

from core.errors import NotFound
from core.memory_upkeep import UpkeepEntry, UpkeepRun
from core.store import schema
from core.store.database import Database


class MemoryUpkeepOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, entries: Sequence[UpkeepEntry]) -> None:
        t = schema.memory_upkeep
        with self.db.begin() as conn:
            for entry in entries:
                conn.execute(delete(t).where(t.c.key == entry.key))
                conn.execute(
                    insert(t).values(
                        key=entry.key,
                        client_id=entry.client_id,
                        next_due=entry.next_due.isoformat(),
                        data=entry.model_dump_json(),
                    )
                )

    def remove(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        t = schema.memory_upkeep
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.key.in_(list(keys))))

    def all(self) -> list[UpkeepEntry]:
        t = schema.memory_upkeep
        with self.db.connect() as conn:
            rows = conn.execute(select(t.c.data).order_by(t.c.key)).scalars()
            return [UpkeepEntry.model_validate_json(r) for r in rows]

    def find(self, key: str) -> UpkeepEntry | None:
        t = schema.memory_upkeep
        with self.db.connect() as conn:
            found = conn.execute(select(t.c.data).where(t.c.key == key)).scalar_one_or_none()
        return None if found is None else UpkeepEntry.model_validate_json(found)

    def get(self, key: str) -> UpkeepEntry:
        found = self.find(key)
        if found is None:
            raise NotFound(f"no memory upkeep is scheduled for {key}")
        return found

    def due(self, now: datetime, limit: int = 100) -> list[UpkeepEntry]:
        t = schema.memory_upkeep
        query = select(t.c.data).where(t.c.next_due <= now.isoformat()).order_by(t.c.next_due)
        with self.db.connect() as conn:
            rows = conn.execute(query.limit(limit)).scalars()
            return [UpkeepEntry.model_validate_json(r) for r in rows]

    def claim(self, entry: UpkeepEntry, following: datetime, run: UpkeepRun) -> bool:
        """Move ``entry`` from the due time it was read at to ``following`` and record ``run``
        as started, in one conditional update; False when another claimed that due time."""
        t = schema.memory_upkeep
        moved = entry.model_copy(
            update={"next_due": following, "last_run": run, "runs": entry.runs + 1}
        )
        with self.db.begin() as conn:
            changed = conn.execute(
                update(t)
                .where(t.c.key == entry.key, t.c.next_due == entry.next_due.isoformat())
                .values(next_due=following.isoformat(), data=moved.model_dump_json())
            ).rowcount
        return bool(changed)

    def finish(self, key: str, run: UpkeepRun) -> None:
        """Record how the run that started at ``run.started_at`` ended (the entry may have been
        removed meanwhile: then nothing is recorded)."""
        t = schema.memory_upkeep
        with self.db.begin() as conn:
            found = conn.execute(select(t.c.data).where(t.c.key == key)).scalar_one_or_none()
            if found is None:
                return
            entry = UpkeepEntry.model_validate_json(found)
            if entry.last_run is not None and entry.last_run.started_at != run.started_at:
                return  # a later run started meanwhile: it owns last_run now
            done = entry.model_copy(update={"last_run": run})
            conn.execute(update(t).where(t.c.key == key).values(data=done.model_dump_json()))

    def request_now(self, key: str, now: datetime) -> UpkeepEntry:
        """Make the entry due at once (the scheduler's next tick runs it)."""
        t = schema.memory_upkeep
        with self.db.begin() as conn:
            found = conn.execute(select(t.c.data).where(t.c.key == key)).scalar_one_or_none()
            if found is None:
                raise NotFound(f"no memory upkeep is scheduled for {key}")
            entry = UpkeepEntry.model_validate_json(found).model_copy(update={"next_due": now})
            conn.execute(
                update(t)
                .where(t.c.key == key)
                .values(next_due=now.isoformat(), data=entry.model_dump_json())
            )
        return entry
