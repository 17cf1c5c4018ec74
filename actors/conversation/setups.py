"""An agent's setup (persona, model profile, tools and hook tasks), read from the library once
and read again only when the library has changed since.

Reading a setup takes ≈ 7 store queries, 3 more per tool and per hook task; a turn used to read
it at every context assembly, and each hook read its task once more when it ran (issue 10). Library
objects only ever gain new versions (``core.store.library``), so a setup as read is still current
exactly when, for each object it was read from, a lookup would still pick the same library (the
client's own object, else the system's) and that library's latest version is still the one read.
One query (``LibraryVersions.latest``) tells, at each turn's context assembly: an edit to the
persona, its profile, a tool or a hook task (a new version, or a client's own object now shadowing
the system's) is read by the next turn. Agents are never changed once stored: read once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from actors.conversation.domain import AgentSetup
from actors.conversation.tool_calls import build_catalog
from core.domain import Agent, ModelProfile, Persona, TaskDef, Tool
from core.errors import NotFound
from core.store import Store
from core.store.library import SYSTEM, LatestVersion, LibraryOps

Versioned = TypeVar("Versioned", Persona, ModelProfile, Tool, TaskDef)


@dataclass(frozen=True, slots=True)
class LibraryRead:
    """One library object a setup was read from.

    ``owner``: whose library held it (``None``: neither, e.g. a hook task not written yet);
    ``version``: the version read (``None``: a pinned version, whose content never changes);
    ``fixed_owner``: looked up in ``owner``'s library only (a persona reference naming its owner),
    not as the client sees it (its own, else the system's).
    """

    kind: str
    id: str
    owner: str | None
    version: int | None = None
    fixed_owner: bool = False


def still_current(
    reads: Iterable[LibraryRead], latest: Iterable[LatestVersion], client_id: str
) -> bool:
    """Whether every object read is still what a lookup as ``client_id`` would read now, given
    the latest version of each in the client's and the system's library (``latest``)."""
    newest = {(v.owner, v.kind, v.id): v.version for v in latest}
    for read in reads:
        owner = read.owner
        if not read.fixed_owner:
            owner = next(
                (o for o in (client_id, SYSTEM) if (o, read.kind, read.id) in newest), None
            )
            if owner != read.owner:
                return False
        if owner is None:
            continue  # absent then, absent now
        version = newest.get((owner, read.kind, read.id))
        if version is None or (read.version is not None and version != read.version):
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Read:
    setup: AgentSetup
    reads: tuple[LibraryRead, ...]


class AgentSetups:
    """The setups of the agents answering in one conversation, as last read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._agents: dict[str, Agent] = {}
        self._read: dict[str, _Read] = {}

    def current(self, agent_id: str) -> AgentSetup:
        """The agent's setup as the library holds it now: the one last read if nothing it was
        read from has changed since (one query), else read again. ``NotFound`` if the agent,
        its persona, profile or a tool is missing."""
        last = self._read.get(agent_id)
        if last is not None:
            client_id = last.setup.agent.client_id
            refs = [(read.kind, read.id) for read in last.reads]
            latest = self.store.library_versions.latest(client_id, refs)
            if still_current(last.reads, latest, client_id):
                return last.setup
        fresh = self._load(self._agent(agent_id))
        self._read[agent_id] = fresh
        return fresh.setup

    def last_read(self, agent_id: str) -> AgentSetup | None:
        """The setup as last read, not checked again: for a step that follows the context
        assembly that checked it (a turn's memory extraction uses its turn's hook task)."""
        last = self._read.get(agent_id)
        return last.setup if last is not None else None

    def _agent(self, agent_id: str) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = self.store.agents.get(agent_id)
        return agent

    def _load(self, agent: Agent) -> _Read:
        reads: list[LibraryRead] = []
        # The client's own objects, else the system's: never another client's (issue 13).
        mine = agent.client_id
        if agent.persona is not None:
            persona = agent.persona
        elif agent.persona_ref is not None:
            ref = agent.persona_ref
            found = self.store.personas.find(ref.id, ref.version, client_id=mine, owner=ref.owner)
            persona = found.obj
            pinned = ref.version is not None
            version = None if pinned else persona.version
            fixed = ref.owner is not None
            reads.append(LibraryRead("persona", ref.id, found.owner, version, fixed))
        else:
            raise NotFound(f"agent {agent.id} has no persona")
        profile = _find(self.store.model_profiles, persona.model_profile_id, mine, reads)
        tools = [_find(self.store.tools, tool_id, mine, reads) for tool_id in persona.tool_ids]
        hook_tasks = []
        for task_id in _hook_task_ids(persona):
            try:
                hook_tasks.append(_find(self.store.tasks, task_id, mine, reads))
            except NotFound:  # the hook fails when it runs, as it did before it was cached
                reads.append(LibraryRead("task", task_id, None))
        setup = AgentSetup(
            agent, persona, profile, build_catalog(persona, tools), tuple(hook_tasks)
        )
        return _Read(setup, tuple(reads))


def _hook_task_ids(persona: Persona) -> list[str]:
    """The persona's hooks that are library tasks (a workflow hook is its coordinator's to read)."""
    ids = (persona.context_assembly_task_id, persona.memory_extraction_task_id)
    return sorted({task_id for task_id in ids if task_id is not None})


def _find(
    ops: LibraryOps[Versioned], obj_id: str, client_id: str, reads: list[LibraryRead]
) -> Versioned:
    found = ops.find(obj_id, client_id=client_id)
    reads.append(LibraryRead(ops.kind, obj_id, found.owner, found.obj.version))
    return found.obj
