"""An agent's persona and model profile as its turns read them (inline, else its reference in its
client's library, else the system's)."""

from __future__ import annotations

from collections.abc import MutableMapping

from core.domain import Agent, ModelProfile, Persona
from core.errors import NotFound
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


def agent_profile(store: Store, agent: Agent) -> ModelProfile | None:
    """The model profile of the agent's persona (None when either is missing)."""
    persona = persona_of(store, agent)
    if persona is None:
        return None
    try:
        return store.model_profiles.get(persona.model_profile_id, client_id=agent.client_id)
    except NotFound:
        return None
