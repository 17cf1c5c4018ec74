"""An agent's memory upkeep as the store holds it: its policy (its own, else its persona's) and
its scheduled entry (``core.memory_upkeep`` holds the rules; the scheduler and the gateway use
these)."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import datetime

from core.domain import Agent, Persona
from core.errors import Conflict, NotFound
from core.memory_policy import MemoryUpkeepPolicy
from core.memory_upkeep import (
    UpkeepEntry,
    agent_key,
    effective_policy,
    plan_entries,
    wanted_for_agent,
)
from core.store import Store

PersonaKey = tuple[str, str, int | None, str | None]


def persona_of(
    store: Store, agent: Agent, seen: MutableMapping[PersonaKey, Persona | None] | None = None
) -> Persona | None:
    """The agent's persona as its turns read it (inline, else its reference in its client's
    library); None when the reference names nothing. ``seen`` caches lookups across agents."""
    ref = agent.persona_ref
    if agent.persona is not None or ref is None:
        return agent.persona
    key = (agent.client_id, ref.id, ref.version, ref.owner)
    if seen is not None and key in seen:
        return seen[key]
    try:
        persona: Persona | None = store.personas.find(
            ref.id, ref.version, client_id=agent.client_id, owner=ref.owner
        ).obj
    except NotFound:
        persona = None
    if seen is not None:
        seen[key] = persona
    return persona


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
