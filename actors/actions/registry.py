"""The registry of executor actions, and what an action is given when it runs.

An action is ``async def action(params, data, ctx) -> Any``: ``params`` come from the task
definition (with ``{{input.x}}`` templates already filled in), ``data`` is the task input merged
with the previous action's output under ``"previous"``, and ``ctx`` says where the task runs and
holds the collaborators (``ActionServices``) it may use. Actions register themselves by kind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import InvalidInput
from core.jsontypes import JsonObject
from core.ports import ChatModels, MemoryAccess, TaskContext, Workspaces
from core.settings import Settings
from core.store import Store


@dataclass(frozen=True, slots=True)
class ActionServices:
    """The collaborators actions use, built once per executor process by whoever wires it."""

    store: Store
    settings: Settings
    chat_models: ChatModels
    memory: MemoryAccess
    workspaces: Workspaces | None = None  # shell.exec and repo.*: conversations' workspaces


@dataclass(frozen=True, slots=True)
class ActionContext:
    """Where a task runs (which client, conversation, agent and turn it serves) and its services."""

    services: ActionServices
    client_id: str | None = None
    conversation_id: str | None = None
    agent_id: str | None = None
    turn_id: str | None = None
    run_id: str | None = None
    settings_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, task: TaskContext, services: ActionServices) -> ActionContext:
        return cls(
            services=services,
            client_id=task.client_id,
            conversation_id=task.conversation_id,
            agent_id=task.agent_id,
            turn_id=task.turn_id,
            run_id=task.run_id,
            settings_env=dict(task.settings_env),
        )


Action = Callable[[JsonObject, JsonObject, ActionContext], Awaitable[Any]]

ACTIONS: dict[str, Action] = {}


def action(kind: str) -> Callable[[Action], Action]:
    """Register an executor action under ``kind`` (e.g. ``"context.get"``)."""

    def register(fn: Action) -> Action:
        ACTIONS[kind] = fn
        return fn

    return register


def get_action(kind: str) -> Action:
    try:
        return ACTIONS[kind]
    except KeyError:
        raise InvalidInput(f"unknown action kind {kind!r}; known: {sorted(ACTIONS)}") from None
