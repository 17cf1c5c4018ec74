"""Memory upkeep on a schedule: the platform consolidates each agent's memories and drops the rows
of long-archived episodes under the agent's policy (``core.memory_policy``), and compacts the
memories table, without an operator typing a command.

Theory of operation. The store holds one *entry* per agent whose policy is on (its persona's, or
its own, which wins) and one for the memories table (its compaction, on the operator's
``WONDER_MEMORY_COMPACT_SCHEDULE``). The cron scheduler (``actors/scheduler.py``) reconciles the
entries with the agents every ``WONDER_MEMORY_UPKEEP_RECONCILE_S`` (``plan_entries``: a new
policy is due at its schedule's next time, a changed schedule moves it, a policy turned off
removes it), and on each tick claims the due entries (a conditional move of ``next_due``, so a due
time starts one run) and runs each as a Ray task. Every step of a run is idempotent (the
consolidate job's), so a run cut by a crash is simply done again at the next due time.

Pure: no storage, no clock (``now`` arrives as an argument).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ConfigDict, Field

from core.cron import next_due, parse_cron
from core.domain import Agent, Persona
from core.jsontypes import JsonObject
from core.memory_policy import MemoryUpkeepPolicy
from core.strict import StrictScalars

TABLE_KEY = "table:memories"
AGENT_PREFIX = "agent:"


def agent_key(agent_id: str) -> str:
    return AGENT_PREFIX + agent_id


class UpkeepRun(StrictScalars):
    """One run of an entry: when, and what it did (the job's totals) or why it failed."""

    model_config = ConfigDict(extra="forbid")

    due_at: datetime
    started_at: datetime
    finished_at: datetime | None = None
    ok: bool | None = None
    result: JsonObject = Field(default_factory=dict)
    error: str | None = None


class UpkeepEntry(StrictScalars):
    """A scheduled upkeep: an agent's (``policy`` set) or the memories table's compaction."""

    model_config = ConfigDict(extra="forbid")

    key: str
    client_id: str | None = None
    agent_id: str | None = None
    policy: MemoryUpkeepPolicy | None = None
    schedule: str
    next_due: datetime
    last_run: UpkeepRun | None = None
    runs: int = 0


@dataclass(frozen=True, slots=True)
class Wanted:
    """What an entry should be: from an agent's policy, or the table's compaction schedule."""

    key: str
    schedule: str
    client_id: str | None = None
    agent_id: str | None = None
    policy: MemoryUpkeepPolicy | None = None


@dataclass(frozen=True, slots=True)
class EntryPlan:
    save: tuple[UpkeepEntry, ...]
    remove: tuple[str, ...]


def effective_policy(agent: Agent, persona: Persona | None) -> MemoryUpkeepPolicy | None:
    """The agent's own policy, else its persona's; None when neither is set or it is off."""
    policy = agent.memory_upkeep
    if policy is None and persona is not None:
        policy = persona.memory_upkeep
    return policy if policy is not None and policy.enabled else None


def wanted_for_agent(agent: Agent, persona: Persona | None) -> Wanted | None:
    policy = effective_policy(agent, persona)
    if policy is None:
        return None
    return Wanted(agent_key(agent.id), policy.schedule, agent.client_id, agent.id, policy)


def wanted_for_table(schedule: str | None) -> Wanted | None:
    return None if not schedule else Wanted(TABLE_KEY, schedule)


def first_due(schedule: str, now: datetime) -> datetime:
    return next_due(parse_cron(schedule), now)


def following_due(entry: UpkeepEntry, now: datetime) -> datetime:
    """The due time after the current one (missed ones skipped: at most one catch-up)."""
    return next_due(parse_cron(entry.schedule), max(entry.next_due, now))


def plan_entries(
    wanted: Iterable[Wanted], stored: Sequence[UpkeepEntry], now: datetime
) -> EntryPlan:
    """Entries to save and keys to remove so that the store holds exactly ``wanted``: a new one
    is first due at its schedule's next time; a changed schedule moves its due time; a changed
    policy keeps it; an entry nobody wants any more goes."""
    by_key = {entry.key: entry for entry in stored}
    save: list[UpkeepEntry] = []
    seen: set[str] = set()
    for want in wanted:
        seen.add(want.key)
        entry = by_key.get(want.key)
        if entry is None:
            save.append(
                UpkeepEntry(
                    key=want.key,
                    client_id=want.client_id,
                    agent_id=want.agent_id,
                    policy=want.policy,
                    schedule=want.schedule,
                    next_due=first_due(want.schedule, now),
                )
            )
        elif entry.schedule != want.schedule:
            save.append(
                entry.model_copy(
                    update={
                        "schedule": want.schedule,
                        "policy": want.policy,
                        "next_due": first_due(want.schedule, now),
                    }
                )
            )
        elif entry.policy != want.policy:
            save.append(entry.model_copy(update={"policy": want.policy}))
    remove = tuple(sorted(key for key in by_key if key not in seen))
    return EntryPlan(tuple(save), remove)


def retention_cutoff(policy: MemoryUpkeepPolicy, now: datetime) -> datetime | None:
    """Episodes folded before this lose their row (None: the policy keeps them)."""
    days = policy.retention.archived_days
    return None if days is None else now - timedelta(days=days)


def strategy_input(
    agent_id: str, episodes: Sequence[tuple[str, str, datetime, float]], max_chars: int
) -> JsonObject:
    """What a library strategy is given for one group: ``(id, content, created_at,
    significance)`` of each episode, oldest first; ``transcript`` is the same as ``{role: date,
    content}`` lines (what an ``llm`` action's ``transcript`` takes)."""
    return {
        "agent_id": agent_id,
        "max_chars": max_chars,
        "transcript": [
            {"role": created_at.date().isoformat(), "content": content}
            for _, content, created_at, _ in episodes
        ],
        "episodes": [
            {
                "id": memory_id,
                "content": content,
                "created_at": created_at.isoformat(),
                "significance": significance,
            }
            for memory_id, content, created_at, significance in episodes
        ],
    }


def strategy_summary(result: object, max_chars: int) -> str | None:
    """The summary a library strategy answered: a string, or ``{"summary": ...}`` (also the
    ``text`` of an ``llm`` action); None when it answered neither or an empty one."""
    if isinstance(result, dict):
        for field in ("summary", "text"):
            if isinstance(result.get(field), str):
                result = result[field]
                break
    if not isinstance(result, str) or not result.strip():
        return None
    return result.strip()[:max_chars]
