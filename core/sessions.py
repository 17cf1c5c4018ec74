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

With an acting user (``X-Wonder-User``, ``core.access``), routing acts as that user: the
destination is checked as if the user posted there (``writer``; a user who is not a member finds
no such thread or conversation), forking at a thread needs what ``POST .../forks`` needs
(``manager`` of the source), and a conversation routing makes (the fork, a main session on first
use) is owned by that user, as a conversation or fork the user makes is. A user who is not a
member of a session's conversation finds no such session (the same ``NotFound`` as for a label
that does not exist); a persona's main session that is not shared with the user is a
``PermissionDenied`` (it exists either way: routing would otherwise make it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from core.access import Action, Level, check
from core.conversations import create_conversation
from core.domain import Agent, PersonaRef
from core.errors import Conflict, InvalidInput, NotFound, PermissionDenied, WonderError
from core.forks import fork_conversation, latest_turn_id
from core.ids import new_id, utc_now
from core.routes import Route, RouteKind
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
    user: str | None = None,
) -> Session:
    """A new label naming ``conversation_id`` (the client's; with ``user``, one that user
    manages), or a new conversation with ``agent_id`` (owned by ``user``); ``Conflict`` when the
    label is taken. The conversation is checked first, so a user who is not its member gets the
    same answer whether or not the label exists."""
    if (conversation_id is None) == (agent_id is None):
        raise InvalidInput("give exactly one of conversation_id or agent_id")
    if conversation_id is not None:
        missing = NotFound(f"conversation_id: conversation {conversation_id} not found")
        try:
            store.conversations.get(conversation_id, client_id=client_id)
        except NotFound:
            raise missing from None
        if user is not None:
            level = store.members.level(conversation_id, user)
            if level is None:
                raise missing
            check(level, Action.MANAGE, user, conversation_id)
    if store.session_labels.get(client_id, label) is not None:
        raise Conflict(f"session {label} exists")
    if conversation_id is not None:
        if not store.session_labels.create(client_id, label, conversation_id, _now()):
            raise Conflict(f"session {label} exists")
        return get_session(store, client_id, label)
    assert agent_id is not None
    try:
        store.agents.get(agent_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"agent_id: agent {agent_id} not found") from None
    return _session_with_new_conversation(
        store, client_id, label, agent_id, exists_ok=False, owner=user
    )


def persona_session(
    store: Store, client_id: str, persona_id: str, user: str | None = None
) -> Session:
    """The persona's main session, made on first use (owned by ``user``, if given)."""
    label = main_label(persona_id)
    if store.session_labels.get(client_id, label) is not None:
        return get_session(store, client_id, label)
    try:
        store.personas.get(persona_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"persona {persona_id} not found in the library") from None
    agent = _persona_agent(store, client_id, persona_id)
    return _session_with_new_conversation(
        store, client_id, label, agent.id, exists_ok=True, owner=user
    )


def route(
    store: Store, client_id: str, kind: RouteKind, target: str, user: str | None = None
) -> Destination:
    """The conversation a message to ``target`` goes to (forking it for a non-tip thread);
    ``user``, the acting user, must be allowed to post there (module docstring)."""
    match kind:
        case "thread":
            return _thread_destination(store, client_id, target, user)
        case "session":
            session = get_session(store, client_id, target)
            _may_post(store, session.conversation_id, user, NotFound(f"session {target} not found"))
            return Destination(session.conversation_id, session=target)
        case "persona":
            session = persona_session(store, client_id, target, user)
            _may_post(store, session.conversation_id, user, _not_shared(target, user))
            return Destination(session.conversation_id, session=session.label)


def makes_conversation(store: Store, client_id: str, to: Route) -> bool:
    """Whether routing to ``to`` now would make a conversation (a fork at a thread that is not
    its tip, a persona's main session on first use): one more against the client's quota."""
    match to.kind:
        case "persona":
            return store.session_labels.get(client_id, main_label(to.target)) is None
        case "session":
            return False
        case "thread":
            try:
                turn = store.turns.get(to.target)
            except NotFound:
                return False  # routing says so, precisely
            return latest_turn_id(store, turn.conversation_id) != to.target


def check_route(store: Store, client_id: str, to: Route, user: str | None = None) -> None:
    """``NotFound`` unless ``to`` names something of the client's now: a library persona, one
    of its session labels, a turn of one of its conversations (for a hook or trigger's rule,
    checked when it is made; where it goes is resolved each time it fires). With ``user``, the
    user must be allowed to post there now (a ``writer``), as when it fires."""
    match to.kind:
        case "persona":
            found = _exists(lambda: store.personas.get(to.target, client_id=client_id))
            what = f"persona {to.target} not found in the library"
        case "session":
            found = store.session_labels.get(client_id, to.target) is not None
            what = f"session {to.target} not found"
        case "thread":
            found = _exists(
                lambda: store.conversations.get(
                    store.turns.get(to.target).conversation_id, client_id=client_id
                )
            )
            what = f"thread {to.target} not found"
    if not found:
        raise NotFound(f"route: {what}")
    if user is not None:
        _may_post_to(store, client_id, to, user, NotFound(f"route: {what}"))


def _may_post_to(store: Store, client_id: str, to: Route, user: str, missing: NotFound) -> None:
    """The acting user's right to post where ``to`` leads now (nothing is made)."""
    match to.kind:
        case "thread":
            conversation_id = store.turns.get(to.target).conversation_id
            _may_post(store, conversation_id, user, missing)
        case "session":
            row = store.session_labels.get(client_id, to.target)
            assert row is not None  # checked by the caller
            _may_post(store, row.conversation_id, user, missing)
        case "persona":
            row = store.session_labels.get(client_id, main_label(to.target))
            if row is not None:  # not made yet: it will be the user's
                _may_post(store, row.conversation_id, user, _not_shared(to.target, user))


def _not_shared(persona_id: str, user: str | None) -> PermissionDenied:
    return PermissionDenied(
        f"the main session of persona {persona_id} ({main_label(persona_id)}) is not shared "
        f"with user {user}"
    )


def _exists(read: Callable[[], object]) -> bool:
    try:
        read()
    except NotFound:
        return False
    return True


def _may_post(store: Store, conversation_id: str, user: str | None, missing: WonderError) -> None:
    """``user`` may post to the conversation (a writer); ``missing`` for a user who is not a
    member (what the route answers when its target is not there)."""
    if user is not None:
        level = store.members.level(conversation_id, user)
        if level is None:
            raise missing
        check(level, Action.WRITE, user, conversation_id)


def _thread_destination(
    store: Store, client_id: str, turn_id: str, user: str | None
) -> Destination:
    missing = NotFound(f"thread {turn_id} not found")
    try:
        turn = store.turns.get(turn_id)
        conversation = store.conversations.get(turn.conversation_id, client_id=client_id)
    except NotFound:
        raise missing from None
    level: Level | None = None
    if user is not None and (level := store.members.level(conversation.id, user)) is None:
        raise missing  # not a member: to this user the thread is not there
    tip = latest_turn_id(store, conversation.id) == turn_id
    if user is not None and level is not None:
        check(level, Action.WRITE if tip else Action.MANAGE, user, conversation.id)
    if tip:
        return Destination(conversation.id)
    fork = fork_conversation(store, conversation, turn_id, owner=user)
    return Destination(fork.id, forked=True)


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
    store: Store,
    client_id: str,
    label: str,
    agent_id: str,
    *,
    exists_ok: bool,
    owner: str | None = None,
) -> Session:
    conversation = create_conversation(store, client_id=client_id, agent_id=agent_id, title=label)
    if not store.session_labels.create(client_id, label, conversation.id, _now()):
        store.delete_conversation_tree(conversation.id)  # another request made it first
        if not exists_ok:
            raise Conflict(f"session {label} exists")
    elif owner is not None:
        store.members.grant(conversation.id, owner, Level.OWNER, utc_now(), owner)
    return get_session(store, client_id, label)


def _now() -> str:
    return utc_now().isoformat()
