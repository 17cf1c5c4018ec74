"""Which turns a client's turn listing shows (``GET /v1/conversations/{id}/turns``): by tool
called, by the workflow run they started, by failure, by status. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from core.domain import Turn, TurnStatus


@dataclass(frozen=True, slots=True)
class TurnFilter:
    """Every condition given must hold; None: not filtered on.

    ``tool``: the turn called the tool of that name. ``turn_ids``: the turn is one of these (the
    turn that started a workflow run). ``failed``: the turn failed, or one of its tool calls did
    (``False``: neither). ``status``: the turn's status."""

    tool: str | None = None
    turn_ids: frozenset[str] | None = None
    failed: bool | None = None
    status: TurnStatus | None = None

    @property
    def needs_tools(self) -> bool:
        return self.tool is not None


def went_wrong(turn: Turn) -> bool:
    """The turn failed, or a tool call of it did."""
    return turn.status is TurnStatus.FAILED or turn.issues.tool_failures > 0


def matches(turn: Turn, tools_called: Collection[str], where: TurnFilter) -> bool:
    if where.tool is not None and where.tool not in tools_called:
        return False
    if where.turn_ids is not None and turn.id not in where.turn_ids:
        return False
    if where.failed is not None and went_wrong(turn) is not where.failed:
        return False
    return where.status is None or turn.status is where.status


def select_turns(
    turns: list[Turn], tools: Mapping[str, Collection[str]], where: TurnFilter
) -> list[Turn]:
    """``turns`` (in listing order) that match ``where``; ``tools``: the tools each called."""
    return [t for t in turns if matches(t, tools.get(t.id, ()), where)]
