"""Executor actions: the primitives a library task is made of.

An action is ``async def action(params, data, ctx) -> Any``: ``params`` come from the task
definition (with ``{{input.x}}`` templates already filled in), ``data`` is the task input merged
with the previous action's output under ``"previous"``. Actions register themselves by kind;
libraries add their own as ``python`` callables (see ``actors.actions.python_call``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import InvalidInput

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ActionContext:
    """Where a task runs: which conversation, agent and turn it serves."""

    client_id: str | None = None
    conversation_id: str | None = None
    agent_id: str | None = None
    turn_id: str | None = None
    settings_env: dict[str, str] = field(default_factory=dict)


Action = Callable[[JsonObject, JsonObject, ActionContext], Awaitable[Any]]

ACTIONS: dict[str, Action] = {}


def action(kind: str) -> Callable[[Action], Action]:
    """Register an executor action under ``kind`` (e.g. ``"context.get"``)."""

    def register(fn: Action) -> Action:
        ACTIONS[kind] = fn
        return fn

    return register


def get_action(kind: str) -> Action:
    _load_builtin_actions()
    try:
        return ACTIONS[kind]
    except KeyError:
        raise InvalidInput(f"unknown action kind {kind!r}; known: {sorted(ACTIONS)}") from None


def _load_builtin_actions() -> None:
    # Imported lazily so that importing the registry stays cheap and free of optional deps.
    from actors.actions import context_actions, http_request, llm_action, python_call  # noqa: F401

    try:
        from actors.actions import memory_actions  # noqa: F401
    except ImportError:  # the memory stack is optional
        pass
