"""A client's agent for a persona gets an id the store's ``agents.id`` column holds (64
characters; PostgreSQL enforces it, SQLite does not)."""

from __future__ import annotations

from actors.conversation.tool_dispatch import AGENT_ID_MAX, persona_agent_id
from core.ids import new_id


def test_a_short_persona_keeps_the_readable_id() -> None:
    client = new_id("client")
    assert persona_agent_id("architect", client) == f"agent_architect_{client}"


def test_a_long_persona_gets_a_digest_that_fits_and_stays_the_same() -> None:
    client = new_id("client")
    persona = "persona-" + new_id().lower()
    agent_id = persona_agent_id(persona, client)
    assert len(agent_id) <= AGENT_ID_MAX and agent_id.startswith("agent_p_")
    assert persona_agent_id(persona, client) == agent_id
    assert persona_agent_id(persona, new_id("client")) != agent_id
