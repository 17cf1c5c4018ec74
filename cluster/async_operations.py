"""The async-operations runner on Ray: its actor and the ``AsyncOperations`` adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from actors.async_operations.runner import AsyncOperationRunner
from actors.conversation.ports import ToolPorts
from cluster import placement
from cluster.metrics import ray_metrics
from cluster.naming import RUNNER_NAME, as_wonder_error, named_detached

_runners: dict[tuple[tuple[str, str], ...], Any] = {}


class AsyncOperationRunnerActor(AsyncOperationRunner):
    """The runner as Ray runs it: it reports how many operations are running."""

    async def start(self, op_id: str, agent_id: str) -> bool:
        started = await super().start(op_id, agent_id)
        ray_metrics().pending_operations(len(self._running))
        return started

    async def _run(self, op_id: str, agent_id: str) -> None:
        try:
            await super()._run(op_id, agent_id)
        finally:
            # Still listed until this task's done-callback runs: count it out already.
            ray_metrics().pending_operations(max(0, len(self._running) - 1))


def runner_handle(settings_env: dict[str, str], ports: Callable[[], ToolPorts]) -> Any:
    """The ``async-operations`` actor (get-or-create; cached per process)."""
    key = tuple(sorted(settings_env.items()))
    if key not in _runners:
        _runners[key] = named_detached(
            AsyncOperationRunnerActor, RUNNER_NAME, ports, **placement.singleton_options()
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
