"""``MemoryFilter``: which of an agent's memories a query sees, as LanceDB SQL (the index path) and
as a boolean mask over resident columns (``core.memory.resident``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.memory.lance import sql_in, sql_literal


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which of an agent's memories a query sees."""

    agent_id: str
    types: tuple[str, ...] = ()
    include_consolidated: bool = False
    created_before: datetime | None = None
    subject: str | None = None

    def sql(self) -> str:
        parts = [f"agent_id = {sql_literal(self.agent_id)}"]
        if self.types:
            parts.append(sql_in("type", self.types))
        if not self.include_consolidated:
            parts.append("consolidated_into IS NULL")
        if self.created_before is not None:
            parts.append(f"created_at < timestamp '{self.created_before.isoformat()}'")
        if self.subject is not None:
            parts.append(f"subject = {sql_literal(self.subject)}")
        return " AND ".join(parts)
