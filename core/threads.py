"""Threads (seed 004): a turn viewed with its ancestry.

Every turn records ``parent_turn_id``: the turn of the message it replies to, else the
conversation's latest turn when it was taken in (a fork's first turn: the turn it forks at, in the
source). Following that chain from a turn to the root gives its thread, crossing into fork sources.
Derived, not stored: ``ancestry`` (root first), ``depth`` (turns in it, the root's is 1),
``total_tokens`` (each turn's prompt + completion tokens, summed), ``has_children`` (a turn
continues from it, or a fork was made at it).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.domain import Message, Persona, Turn
from core.errors import NotFound
from core.store import Store

MAX_DEPTH = 10_000


@dataclass(frozen=True)
class Thread:
    turn: Turn
    ancestry: list[Turn]  # root first, ``turn`` last
    has_children: bool
    persona: Persona | None
    messages: list[Message]

    @property
    def total_tokens(self) -> int:
        return sum(t.usage.prompt_tokens + t.usage.completion_tokens for t in self.ancestry)


def thread_of(store: Store, turn_id: str, client_id: str) -> Thread:
    """The thread ending at ``turn_id`` if its conversation is ``client_id``'s; ``NotFound``
    otherwise (never reveal another client's turns)."""
    try:
        turn = store.turns.get(turn_id)
        store.conversations.get(turn.conversation_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"thread {turn_id} not found") from None
    ancestry = [turn]
    while ancestry[-1].parent_turn_id is not None and len(ancestry) < MAX_DEPTH:
        ancestry.append(store.turns.get(ancestry[-1].parent_turn_id))
    ancestry.reverse()
    order = {t.id: n for n, t in enumerate(ancestry)}
    messages = sorted(
        (
            m
            for conversation_id in dict.fromkeys(t.conversation_id for t in ancestry)
            for m in store.messages.list(
                conversation_id, turn_ids=[t.id for t in ancestry], limit=100_000
            )
        ),
        key=lambda m: (order[m.turn_id], m.seq),
    )
    return Thread(
        turn=turn,
        ancestry=ancestry,
        has_children=_has_children(store, turn),
        persona=_persona(store, turn),
        messages=messages,
    )


def _has_children(store: Store, turn: Turn) -> bool:
    """A later turn of its conversation, or of a fork that sees it, continues from it; or a fork
    was made at it."""
    seeing = [turn.conversation_id, *store.forks.inheriting(turn.conversation_id, turn.id)]
    if store.forks.made_at(turn.id):
        return True
    return any(
        later.parent_turn_id == turn.id
        for conversation_id in seeing
        for later in store.turns.list(conversation_id)
        if later.id > turn.id
    )


def _persona(store: Store, turn: Turn) -> Persona | None:
    """The persona of the agent that ran the turn (None when no agent did)."""
    agent_id = turn.agent_id
    if agent_id is None:
        return None
    try:
        agent = store.agents.get(agent_id)
        if agent.persona is not None:
            return agent.persona
        if agent.persona_ref is not None:
            ref = agent.persona_ref
            return store.personas.get(
                ref.id, ref.version, client_id=agent.client_id, owner=ref.owner
            )
    except NotFound:
        return None
    return None
