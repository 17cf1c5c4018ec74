"""Routing targets (seed 004): what a routed message or a trigger names (rules: core.sessions)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.domain import Model

RouteKind = Literal["thread", "session", "persona"]


class Route(Model):
    kind: RouteKind = "persona"
    target: str = Field(max_length=200, description="Turn id, session label or persona id")
