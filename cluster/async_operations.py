"""The async-operations runner on Ray: its actor and the ``AsyncOperations`` adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from actors.async_operations.runner import AsyncOperationRunner
from actors.conversation.ports import ToolPorts
from cluster import placement
from cluster.naming import RUNNER_NAME, as_wonder_error, named_detached

_runners: dict[tuple[tuple[str, str], ...], Any] = {}


def runner_handle(settings_env: dict[str, str], ports: Callable[[], ToolPorts]) -> Any:
    """The ``async-operations`` actor (get-or-create; cached per process)."""
    key = tuple(sorted(settings_env.items()))
    if key not in _runners:
        _runners[key] = named_detached(
            AsyncOperationRunner, RUNNER_NAME, ports, **placement.singleton_options()
        )
    return _runners[key]


class RayAsyncOperations:
    """``AsyncOperations`` over the runner actor."""

    def __init__(self, runner: Callable[[], Any]) -> None:
        self._runner = runner

    async def start(self, op_id: str, agent_id: str) -> None:
        try:
            await self._runner().start.remote(op_id, agent_id)
        except (ray.exceptions.RayError, ray.exceptions.ActorUnavailableError) as exc:
            raise as_wonder_error(exc, "the async-operations runner") from None

    async def running(self) -> frozenset[str]:
        try:
            running: frozenset[str] = await self._runner().running.remote()
        except (ray.exceptions.RayError, ray.exceptions.ActorUnavailableError) as exc:
            raise as_wonder_error(exc, "the async-operations runner") from None
        return running
