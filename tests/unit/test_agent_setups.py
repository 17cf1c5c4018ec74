"""An agent's setup is read from the library once and again only when the library changed
(``actors.conversation.setups``): the check itself (pure, table-driven), then ``AgentSetups``
over a real SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.conversation.setups import AgentSetups, LibraryRead, still_current
from core.domain import Agent, PersonaRef, TaskAction, TaskDef
from core.ids import new_id, utc_now
from core.store import Store
from core.store.library import SYSTEM, LatestVersion
from tests.factories import make_agent, make_client, scripted_profile

CLIENT = "client_a"


def latest(*rows: tuple[str, int]) -> list[LatestVersion]:
    """Rows of ``("owner", version)`` for the persona ``p``."""
    return [LatestVersion(owner, "persona", "p", version) for owner, version in rows]


@pytest.mark.parametrize(
    ("read", "now", "current"),
    [
        # the client's view: its own object, else the system's
        (LibraryRead("persona", "p", SYSTEM, 2), latest((SYSTEM, 2)), True),
        (LibraryRead("persona", "p", SYSTEM, 2), latest((SYSTEM, 3)), False),  # edited
        (LibraryRead("persona", "p", SYSTEM, 2), latest((SYSTEM, 2), (CLIENT, 1)), False),
        (LibraryRead("persona", "p", CLIENT, 1), latest((SYSTEM, 5), (CLIENT, 1)), True),
        (LibraryRead("persona", "p", CLIENT, 1), latest((SYSTEM, 5), (CLIENT, 2)), False),
        # a pinned version never changes; whose library it is looked up in still may
        (LibraryRead("persona", "p", SYSTEM, None), latest((SYSTEM, 7)), True),
        (LibraryRead("persona", "p", SYSTEM, None), latest((SYSTEM, 7), (CLIENT, 1)), False),
        # a reference naming its owner ignores the other library
        (LibraryRead("persona", "p", SYSTEM, 2, True), latest((SYSTEM, 2), (CLIENT, 1)), True),
        (LibraryRead("persona", "p", SYSTEM, 2, True), latest((SYSTEM, 3)), False),
        # absent when read (a hook task not written yet)
        (LibraryRead("persona", "p", None), [], True),
        (LibraryRead("persona", "p", None), latest((CLIENT, 1)), False),
    ],
)
def test_a_read_is_current_while_a_lookup_would_read_the_same(
    read: LibraryRead, now: list[LatestVersion], current: bool
) -> None:
    assert still_current([read], now, CLIENT) is current


def test_other_clients_and_other_objects_do_not_matter() -> None:
    read = LibraryRead("persona", "p", SYSTEM, 2)
    now = [
        LatestVersion(SYSTEM, "persona", "p", 2),
        LatestVersion(SYSTEM, "task", "p", 9),  # another kind, same id
        LatestVersion("client_b", "persona", "p", 4),  # never asked for, but not ours anyway
    ]
    assert still_current([read], now, CLIENT)


# --------------------------------------------------------------------------- over a real store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def hook_task(store: Store, task_id: str, value: str, owner: str = SYSTEM) -> TaskDef:
    action = TaskAction(kind="context.set", params={"key": "k", "value": value})
    return store.tasks.put(TaskDef(id=task_id, actions=[action]), utc_now(), owner=owner)


def test_an_unchanged_library_is_read_once_and_every_edit_is_read(store: Store) -> None:
    client_id, _key = make_client(store)
    task_id = f"hook-{new_id().lower()}"
    hook_task(store, task_id, "v1")
    agent = make_agent(store, client_id, scripted_profile(store), memory_extraction_task_id=task_id)
    setups = AgentSetups(store)
    first = setups.current(agent.id)
    assert setups.current(agent.id) is first  # nothing changed: not read again
    hook = first.hook_task(task_id)
    assert hook is not None and hook.actions[0].params["value"] == "v1"

    hook_task(store, task_id, "v2")  # the hook task edited
    second = setups.current(agent.id)
    assert second is not first
    assert second.hook_task(task_id).actions[0].params["value"] == "v2"  # type: ignore[union-attr]

    persona = store.personas.get(first.persona.id)
    store.personas.put(persona.model_copy(update={"system_prompt": "edited"}), utc_now())
    assert setups.current(agent.id).persona.system_prompt == "edited"

    hook_task(store, task_id, "mine", owner=client_id)  # the client's own now shadows it
    third = setups.current(agent.id)
    assert third.hook_task(task_id).actions[0].params["value"] == "mine"  # type: ignore[union-attr]
    assert setups.current(agent.id) is third
    assert setups.last_read(agent.id) is third


def test_a_hook_task_written_after_the_setup_is_read_on_the_next_turn(store: Store) -> None:
    client_id, _key = make_client(store)
    task_id = f"hook-{new_id().lower()}"
    agent = make_agent(store, client_id, scripted_profile(store), context_assembly_task_id=task_id)
    setups = AgentSetups(store)
    assert setups.current(agent.id).hook_task(task_id) is None  # missing: it fails when run
    hook_task(store, task_id, "now here")
    assert setups.current(agent.id).hook_task(task_id) is not None


def test_a_pinned_persona_stays_at_its_version(store: Store) -> None:
    client_id, _key = make_client(store)
    pinned = make_agent(store, client_id, scripted_profile(store), system_prompt="v1")
    persona = store.personas.get(pinned.persona_ref.id)  # type: ignore[union-attr]
    agent = store.agents.insert(
        Agent(
            id=new_id("agent"),
            client_id=client_id,
            name="pinned",
            persona_ref=PersonaRef(id=persona.id, version=persona.version),
            created_at=utc_now(),
        )
    )
    setups = AgentSetups(store)
    first = setups.current(agent.id)
    store.personas.put(persona.model_copy(update={"system_prompt": "v2"}), utc_now())
    assert setups.current(agent.id) is first and first.persona.system_prompt == "v1"
