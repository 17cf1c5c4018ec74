"""Sessions and routing (seed 004).

A *session* is a stable label (per client) naming a conversation whose tip moves as turns are
added: its head is the conversation's latest turn. Messages sent to a session are posted to that
conversation, so each new turn continues from the head at the time it is taken in (the
conversation's actor takes messages in one at a time): queued messages land on the head in order
and never fork off each other. A persona's *main session*, ``<persona>:main``, is made on first
use: a conversation with the client's agent for that persona (its oldest, or a new one).

*Routing* resolves a target to a conversation: a thread (a turn) appends to its conversation when
that turn is the conversation's tip, otherwise forks the conversation at it; a session is its
conversation; a persona is its main session.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from core.conversations import create_conversation
from core.domain import Agent, PersonaRef
from core.errors import Conflict, InvalidInput, NotFound
from core.forks import fork_conversation, latest_turn_id
from core.ids import new_id, utc_now
from core.routes import RouteKind
from core.store import Store

MAIN_SUFFIX = ":main"


@dataclass(frozen=True)
class Session:
    label: str
    conversation_id: str
    head_turn_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class Destination:
    """Where a routed message goes: the conversation, and whether routing forked it."""

    conversation_id: str
    forked: bool = False
    session: str | None = None


def main_label(persona_id: str) -> str:
    return f"{persona_id}{MAIN_SUFFIX}"


def get_session(store: Store, client_id: str, label: str) -> Session:
    row = store.session_labels.get(client_id, label)
    if row is None:
        raise NotFound(f"session {label} not found")
    return Session(
        label=row.label,
        conversation_id=row.conversation_id,
        head_turn_id=latest_turn_id(store, row.conversation_id),
        created_at=datetime.fromisoformat(row.created_at),
    )


def create_session(
    store: Store,
    client_id: str,
    label: str,
    *,
    conversation_id: str | None = None,
    agent_id: str | None = None,
) -> Session:
    """A new label naming ``conversation_id`` (the client's), or a new conversation with
    ``agent_id``; ``Conflict`` when the label is taken."""
    if (conversation_id is None) == (agent_id is None):
        raise InvalidInput("give exactly one of conversation_id or agent_id")
    if store.session_labels.get(client_id, label) is not None:
        raise Conflict(f"session {label} exists")
    if conversation_id is not None:
        try:
            store.conversations.get(conversation_id, client_id=client_id)
        except NotFound:
            raise NotFound(f"conversation_id: conversation {conversation_id} not found") from None
        if not store.session_labels.create(client_id, label, conversation_id, _now()):
            raise Conflict(f"session {label} exists")
        return get_session(store, client_id, label)
    assert agent_id is not None
    try:
        store.agents.get(agent_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"agent_id: agent {agent_id} not found") from None
    return _session_with_new_conversation(store, client_id, label, agent_id, exists_ok=False)


def persona_session(store: Store, client_id: str, persona_id: str) -> Session:
    """The persona's main session, made on first use."""
    label = main_label(persona_id)
    if store.session_labels.get(client_id, label) is not None:
        return get_session(store, client_id, label)
    try:
        store.personas.get(persona_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"persona {persona_id} not found in the library") from None
    agent = _persona_agent(store, client_id, persona_id)
    return _session_with_new_conversation(store, client_id, label, agent.id, exists_ok=True)


def route(store: Store, client_id: str, kind: RouteKind, target: str) -> Destination:
    """The conversation a message to ``target`` goes to (forking it for a non-tip thread)."""
    match kind:
        case "thread":
            return _thread_destination(store, client_id, target)
        case "session":
            return Destination(
                get_session(store, client_id, target).conversation_id, session=target
            )
        case "persona":
            session = persona_session(store, client_id, target)
            return Destination(session.conversation_id, session=session.label)


def _thread_destination(store: Store, client_id: str, turn_id: str) -> Destination:
    try:
        turn = store.turns.get(turn_id)
        conversation = store.conversations.get(turn.conversation_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"thread {turn_id} not found") from None
    if latest_turn_id(store, conversation.id) == turn_id:
        return Destination(conversation.id)
    return Destination(fork_conversation(store, conversation, turn_id).id, forked=True)


def _persona_agent(store: Store, client_id: str, persona_id: str) -> Agent:
    for agent in store.agents.list_for_client(client_id):  # ordered by id: the oldest first
        if agent.persona_ref is not None and agent.persona_ref.id == persona_id:
            return agent
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name=persona_id,
        persona_ref=PersonaRef(id=persona_id),
        created_at=utc_now(),
    )
    return store.agents.insert(agent)


def _session_with_new_conversation(
    store: Store, client_id: str, label: str, agent_id: str, *, exists_ok: bool
) -> Session:
    conversation = create_conversation(store, client_id=client_id, agent_id=agent_id, title=label)
    if not store.session_labels.create(client_id, label, conversation.id, _now()):
        store.delete_conversation_tree(conversation.id)  # another request made it first
        if not exists_ok:
            raise Conflict(f"session {label} exists")
    return get_session(store, client_id, label)


def _now() -> str:
    return utc_now().isoformat()
