"""A webhook as stored (the delivery rules are in ``core.hooks``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from core.domain import Model
from core.routes import Route


class Hook(Model):
    id: str
    client_id: str
    secret: str  # hex; shown to the client once, when the hook is made
    route: Route
    title: str | None = None
    created_at: datetime
    user_id: str | None = Field(
        None, description="The user who made it: deliveries post as that user (None: the client)"
    )
