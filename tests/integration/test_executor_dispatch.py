"""Executor tasks through the node's dispatcher, on real Ray, from detached actors standing for
conversations: their tasks share a warm worker (submitted from each actor, Ray starts a worker
per actor), and a caller that cancels its call cancels the task."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import placement
from cluster.executor import RayTaskRunner
from cluster.executor_dispatch import DispatchedTaskRunner
from cluster.naming import named_detached
from cluster.wiring import EXECUTOR_SERVICES
from core.domain import TaskAction, TaskDef
from core.ids import new_id
from core.ports import TaskContext
from core.settings import settings_from_env
from tests.conftest import Cluster

pytestmark = pytest.mark.timeout(300)


def _task(name: str) -> TaskDef:
    return TaskDef(id="t", actions=[TaskAction(kind="python", params={"callable": name})])


class Caller:
    """A detached actor running executor tasks from its own process, as a conversation does."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        options = placement.executor_options(settings_from_env(env))
        self.direct = RayTaskRunner(EXECUTOR_SERVICES, **options)
        self.dispatched = DispatchedTaskRunner(EXECUTOR_SERVICES, options)
        self.running: asyncio.Task[Any] | None = None

    async def pid(self, how: str) -> int:
        runner = self.dispatched if how == "dispatched" else self.direct
        context = TaskContext(settings_env=self.env)
        outcome = await runner.run(_task("tests.callables:worker_pid"), {}, context)
        assert outcome.success, outcome
        return int(outcome.result["pid"])  # type: ignore[index]

    async def start(self, path: str, seconds: float) -> None:
        context = TaskContext(settings_env=self.env)
        task = _task("tests.callables:mark_wait_mark")
        work = self.dispatched.run(task, {"path": path, "seconds": seconds}, context)
        self.running = asyncio.get_running_loop().create_task(work)

    async def cancel(self) -> bool:
        assert self.running is not None
        self.running.cancel()
        try:
            await self.running
        except asyncio.CancelledError:
            return True
        return False


def callers(env: dict[str, str], n: int) -> list[Any]:
    return [named_detached(Caller, f"test-caller:{new_id('c')}", env) for _ in range(n)]


async def test_two_detached_callers_share_a_warm_worker_through_the_dispatcher(
    ray_cluster: Cluster,
) -> None:
    a, b = callers(ray_cluster.env, 2)
    try:
        # Ray gives each detached actor's own tasks workers of their own: the cost the
        # dispatcher removes (a process start and the executor's imports per conversation).
        direct = [await a.pid.remote("direct"), await b.pid.remote("direct")]
        assert direct[0] != direct[1]
        dispatched = [await c.pid.remote("dispatched") for c in (a, b, a, b)]
        assert len(set(dispatched)) == 1, dispatched
        assert dispatched[0] not in direct
    finally:
        for caller in (a, b):
            ray.kill(caller)


async def test_a_cancelled_call_cancels_its_task(ray_cluster: Cluster, tmp_path: Path) -> None:
    (caller,) = callers(ray_cluster.env, 1)
    marks = tmp_path / "marks"
    try:
        await caller.start.remote(str(marks), 8.0)
        deadline = time.monotonic() + 120
        while not (marks.exists() and marks.read_text()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert marks.read_text() == "start\n"
        assert await caller.cancel.remote()
        await asyncio.sleep(12)  # past the task's own end, had it gone on
        assert marks.read_text() == "start\n"
        assert await caller.pid.remote("dispatched") > 0  # the dispatcher goes on serving
    finally:
        ray.kill(caller)
