"""A cron trigger as stored (the rules are in ``core.triggers``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from core.domain import Model
from core.routes import Route


class CronTrigger(Model):
    id: str
    client_id: str
    schedule: str = Field(description="Five cron fields, UTC")
    template: str = Field(description="The message; {{due_at}} becomes the due time (ISO 8601)")
    route: Route
    next_due: datetime
    created_at: datetime
    user_id: str | None = Field(
        None, description="The user who made it: it posts as that user (None: the client)"
    )
