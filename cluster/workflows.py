"""Workflow coordinators on Ray: the ``Coordinators`` adapter (one named detached actor per run,
``workflow:<run_id>``) and the reserve of coordinators started ahead of their runs.

The rules of starting, waiting for and cancelling runs are ``WorkflowRunService``'s (in the
coordinator package); this module only runs the actors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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
        max_restarts=0,  # a restarted coordinator would not have its tokens back
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
        try:
            await coordinator(run_id, self._ports, self.settings_env).start.remote()
            ray_metrics().workflow_run_started()
        except RAY_ERRORS as exc:
            raise as_wonder_error(exc, f"the coordinator of {run_id}") from None

    def is_live(self, run_id: str) -> bool:
        return existing_actor(workflow_actor_name(run_id)) is not None

    async def wait(self, run_id: str, timeout_s: float | None) -> None:
        handle = existing_actor(workflow_actor_name(run_id))
        if handle is None:
            return
        try:
            await handle.wait.remote(timeout_s)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass  # it exited between lookup and call: the store has the outcome

    async def cancel(self, run_id: str, reason: str) -> None:
        handle = existing_actor(workflow_actor_name(run_id))
        if handle is None:
            return
        try:
            await handle.cancel.remote(reason)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass

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
