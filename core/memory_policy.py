"""A persona's or agent's memory upkeep policy: when the platform consolidates the agent's
memories, how (a built-in or a library-defined strategy), and how long archived episodes keep a
row in the memories table. The rules that apply it are in ``core.memory_upkeep``.

Light on purpose (pydantic and the cron grammar only): ``core.domain`` puts the policy on
``Persona`` and ``Agent``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator

from core.cron import CRON_PATTERN, next_due, parse_cron
from core.errors import InvalidInput
from core.strict import StrictScalars

# The library id grammar (``core.domain.NAME_PATTERN``; that module imports this one).
LIBRARY_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
StrategyId = Annotated[str, Field(pattern=LIBRARY_ID_PATTERN)]

DEFAULT_SCHEDULE = "17 3 * * *"
HOURS_PER_YEAR = 24 * 366


class _Policy(StrictScalars):
    model_config = ConfigDict(extra="forbid")


class ConsolidationPolicy(_Policy):
    """Which episodes are folded into summaries, and who writes the summaries.

    The strategy is the built-in one (an extractive summary, or ``model_profile_id``'s model),
    or a library task or workflow: it is given ``{agent_id, episodes: [{id, content, created_at,
    significance}], max_chars}`` for each group and answers the summary (a string, or an object
    with ``summary``). The platform does the rest: groups, ids, archiving, marking (all
    idempotent)."""

    after_hours: float = Field(
        24.0, ge=0, le=HOURS_PER_YEAR, description="Episodes older than this are folded"
    )
    group_size: int = Field(20, ge=1, le=200, description="Episodes per summary, at most")
    min_group: int = Field(2, ge=1, le=200, description="Fewer episodes than this wait")
    strategy_task_id: StrategyId | None = Field(
        None, description="Library task that writes a group's summary"
    )
    strategy_workflow: StrategyId | None = Field(
        None, description="Library workflow that writes a group's summary"
    )
    model_profile_id: StrategyId | None = Field(
        None, description="Built-in strategy, summaries written by this model profile"
    )
    summary_chars: int = Field(2000, ge=100, le=4000, description="A summary's length, at most")

    @model_validator(mode="after")
    def _one_strategy(self) -> ConsolidationPolicy:
        named = [
            name
            for name in ("strategy_task_id", "strategy_workflow", "model_profile_id")
            if getattr(self, name) is not None
        ]
        if len(named) > 1:
            raise ValueError(f"{' and '.join(named)} are exclusive: one consolidation strategy")
        if self.min_group > self.group_size:
            raise ValueError("min_group must not exceed group_size")
        return self


class RetentionPolicy(_Policy):
    """How long an episode folded into a summary keeps its row (its content is archived in the
    object store when it is folded, and stays there)."""

    archived_days: float | None = Field(
        None,
        ge=0,
        le=36_600,
        description="Rows of folded episodes are removed from the memories table this many days "
        "after folding (searches no longer see them, even with include_consolidated; the "
        "archived content and the summary's metadata.sources stay). None: kept",
    )


class MemoryUpkeepPolicy(_Policy):
    """Consolidation and retention of one agent's memories, run by the platform on a schedule."""

    enabled: bool = Field(True, description="False turns a persona's upkeep off for an agent")
    schedule: str = Field(
        DEFAULT_SCHEDULE, pattern=CRON_PATTERN, description="Five cron fields, UTC"
    )
    consolidation: ConsolidationPolicy | None = Field(
        default_factory=ConsolidationPolicy, description="None: no consolidation"
    )
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)

    @field_validator("schedule")
    @classmethod
    def _parses(cls, value: str) -> str:
        try:
            next_due(parse_cron(value), datetime(2000, 1, 1, tzinfo=UTC))
        except InvalidInput as exc:  # names the cron field that is wrong
            raise ValueError(exc.message) from None
        return value.strip()

    @property
    def strategy(self) -> tuple[str, str] | None:
        """``("task", id)`` or ``("workflow", id)`` for a library strategy, else None."""
        policy = self.consolidation
        if policy is None:
            return None
        if policy.strategy_task_id is not None:
            return ("task", policy.strategy_task_id)
        if policy.strategy_workflow is not None:
            return ("workflow", policy.strategy_workflow)
        return None
