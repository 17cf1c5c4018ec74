"""Workflow coordinators on Ray: the ``Coordinators`` adapter (one named detached actor per run,
``workflow:<run_id>``) and the reserve of coordinators started ahead of their runs.

The rules of starting, waiting for and cancelling runs are ``WorkflowRunService``'s (in the
coordinator package); this module only runs the actors. A coordinator whose process or node dies
is restarted by Ray (``max_restarts=-1``: the bound on resumptions is the run's own, counted in
the store); the new incarnation resumes the run. Calls cut by such a restart are made again
(``ACTOR_CALL``): ``start`` and ``cancel`` are idempotent, ``wait`` waits on.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from actors.workflow_coordinator.actor import WorkflowCoordinator
from actors.workflow_coordinator.ports import CoordinatorPorts
from actors.workflow_coordinator.reserve import CoordinatorReserve
from cluster import placement
from cluster.metrics import ray_metrics
from cluster.naming import (
    RESERVE_NAME,
    as_wonder_error,
    existing_actor,
    named_detached,
    workflow_actor_name,
)
from core.retry import ACTOR_CALL, with_retries
from core.settings import settings_from_env

PortsFactory = Callable[[], CoordinatorPorts]
RAY_ERRORS = (ray.exceptions.RayError, ray.exceptions.ActorUnavailableError)


def reserve_size() -> int:
    """``WONDER_WORKFLOW_RESERVE``: coordinators kept ready ahead of runs (default 2; 0: none)."""
    return max(0, int(os.environ.get("WONDER_WORKFLOW_RESERVE", "2")))


def coordinator(run_id: str, ports: PortsFactory, settings_env: dict[str, str]) -> Any:
    """Get or create the named detached coordinator of ``run_id`` (placed per
    ``cluster.placement.coordinator_options``)."""
    return named_detached(
        WorkflowCoordinator,
        workflow_actor_name(run_id),
        run_id,
        ports,
        **placement.coordinator_options(settings_from_env(settings_env)),
    )


class ReserveActor(CoordinatorReserve):
    """The reserve as Ray runs it: it starts coordinators with ``ports``."""

    def __init__(self, size: int, settings_env: dict[str, str], ports: PortsFactory) -> None:
        async def start(run_id: str) -> object:
            ready: object = await coordinator(run_id, ports, settings_env).ready.remote()
            return ready

        super().__init__(size, settings_env, start)


class RayCoordinators:
    """``Coordinators`` over Ray actors, with this process's handle on the reserve."""

    def __init__(self, settings_env: dict[str, str], ports: PortsFactory) -> None:
        self.settings_env = settings_env
        self._ports = ports
        self._reserve: dict[str, Any] = {}  # "waking" → handle; "ready" once it answered

    async def launch(self, run_id: str) -> None:
        await self._on_coordinator(
            run_id, lambda: coordinator(run_id, self._ports, self.settings_env).start.remote()
        )
        ray_metrics().workflow_run_started()

    def is_live(self, run_id: str) -> bool:
        return existing_actor(workflow_actor_name(run_id)) is not None

    def revive(self, run_id: str) -> None:
        coordinator(run_id, self._ports, self.settings_env)

    async def wait(self, run_id: str, timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s

        def wait_on_it() -> Awaitable[Any] | None:
            handle = existing_actor(workflow_actor_name(run_id))
            if handle is None:
                return None  # it exited: the run has ended, the store has the outcome
            left = None if deadline is None else max(0.0, deadline - loop.time())
            return handle.wait.remote(left)  # type: ignore[no-any-return]

        await self._on_coordinator(run_id, wait_on_it)

    async def cancel(self, run_id: str, reason: str) -> None:
        def cancel_it() -> Awaitable[Any] | None:
            handle = existing_actor(workflow_actor_name(run_id))
            return None if handle is None else handle.cancel.remote(reason)

        await self._on_coordinator(run_id, cancel_it)

    async def _on_coordinator(self, run_id: str, call: Callable[[], Awaitable[Any] | None]) -> None:
        """``call()`` (None: nothing to call), made again (``ACTOR_CALL``) while the coordinator
        restarts."""

        async def attempt() -> None:
            pending = call()
            if pending is None:
                return
            try:
                await pending
            except RAY_ERRORS as exc:
                raise as_wonder_error(exc, f"the coordinator of {run_id}") from None

        await with_retries(ACTOR_CALL, attempt)

    def wake_reserve(self) -> None:
        """Make sure this process has the reserve's handle (or is fetching it); never blocks."""
        if reserve_size() == 0 or "waking" in self._reserve:
            return
        handle = named_detached(
            ReserveActor,
            RESERVE_NAME,
            reserve_size(),
            self.settings_env,
            self._ports,
            **placement.singleton_options(),
        )
        self._reserve["waking"] = handle
        ref = handle.wake.remote()
        ref.future().add_done_callback(lambda _f: self._reserve.setdefault("ready", handle))

    async def reserved_run_id(self) -> str | None:
        """A run id whose coordinator is already up, when the reserve has one.

        The first call in a process only wakes the reserve (creating it can take seconds) and
        starts this run cold; later calls ask it, a ~1 ms actor call.
        """
        handle = self._reserve.get("ready")
        if handle is None:
            self.wake_reserve()
            return None
        try:
            run_id: str | None = await handle.take.remote(self.settings_env)
        except RAY_ERRORS:
            self._reserve.clear()  # gone: wake it again next time
            return None
        return run_id
