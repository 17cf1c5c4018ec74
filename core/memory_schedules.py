"""An agent's memory upkeep as the store holds it: its policy (its own, else its persona's) and
its scheduled entry (``core.memory_upkeep`` holds the rules; the scheduler and the gateway use
these)."""

from __future__ import annotations

from datetime import datetime

from core.agent_personas import persona_of
from core.domain import Agent
from core.errors import Conflict
from core.memory_policy import MemoryUpkeepPolicy
from core.memory_upkeep import (
    UpkeepEntry,
    agent_key,
    effective_policy,
    plan_entries,
    wanted_for_agent,
)
from core.store import Store


def agent_policy(store: Store, agent: Agent) -> MemoryUpkeepPolicy | None:
    return effective_policy(agent, persona_of(store, agent))


def reschedule(store: Store, agent: Agent, now: datetime) -> UpkeepEntry | None:
    """Make the agent's entry what its policy says now (the scheduler's next reconcile would);
    returns the entry, None when the agent has no upkeep."""
    want = wanted_for_agent(agent, persona_of(store, agent))
    key = agent_key(agent.id)
    stored = store.memory_upkeep.find(key)
    plan = plan_entries([want] if want is not None else [], [stored] if stored else [], now)
    store.memory_upkeep.save(plan.save)
    store.memory_upkeep.remove(plan.remove)
    return store.memory_upkeep.find(key)


def run_now(store: Store, agent: Agent, now: datetime) -> UpkeepEntry:
    """Make the agent's upkeep due at once (the scheduler starts it at its next tick);
    ``Conflict`` when the agent has no upkeep policy."""
    if reschedule(store, agent, now) is None:
        raise Conflict(
            f"agent {agent.id} has no memory upkeep policy (set memory_upkeep on it or on its "
            "persona)"
        )
    return store.memory_upkeep.request_now(agent_key(agent.id), now)
