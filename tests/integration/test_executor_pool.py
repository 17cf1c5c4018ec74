"""The executor pool on real Ray: tasks run on long-lived processes, and the executor's
containment holds per task there (a task that ends its process, spins or hogs memory fails
alone; the pool heals). ``sys.exit`` over the gateway: test_gateway_security.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import ray

from cluster.executor import RayTaskRunner
from cluster.executor_pool import PooledTaskRunner, start_pool
from cluster.executor_wiring import executor_services
from core.domain import TaskAction, TaskDef
from core.errors import RetryableError
from core.ports import TaskContext, TaskOutcome
from core.settings import settings_from_env
from tests.conftest import Cluster


def runner(env: dict[str, str]) -> PooledTaskRunner:
    return PooledTaskRunner(
        settings_from_env(env), executor_services, RayTaskRunner(executor_services)
    )


async def run(
    pool: PooledTaskRunner, env: dict[str, str], name: str, **task_input: Any
) -> TaskOutcome:
    """Run ``name`` as a turn's hook runs (only hooks use the pool)."""
    task = TaskDef(id="t", actions=[TaskAction(kind="python", params={"callable": name})])
    context = TaskContext(settings_env=env, hook="context_assembly")
    return await pool.run(task, task_input, context)


async def member_pids(env: dict[str, str]) -> list[int]:
    members = start_pool(settings_from_env(env))
    return list(await asyncio.gather(*(m.pid.remote() for m in members)))


async def pid_of(pool: PooledTaskRunner, env: dict[str, str]) -> int:
    outcome = await run(pool, env, "tests.callables:worker_pid")
    assert outcome.success, outcome
    pid = outcome.result["pid"]  # type: ignore[index]
    assert isinstance(pid, int)
    return pid


@pytest.mark.timeout(300)
async def test_tasks_run_on_the_pools_processes(ray_cluster: Cluster) -> None:
    env = ray_cluster.env
    members = await member_pids(env)
    assert len(set(members)) == settings_from_env(env).executor_pool_size == 2
    pool = runner(env)
    seen = {await pid_of(pool, env) for _ in range(4)}
    assert seen == set(members)  # one after the other: the members take turns
    assert await member_pids(env) == members


@pytest.mark.timeout(300)
async def test_a_caller_using_every_member_runs_its_next_task_as_a_ray_task(
    ray_cluster: Cluster,
) -> None:
    env = ray_cluster.env
    members = await member_pids(env)
    pool = runner(env)
    outcomes = await asyncio.gather(
        *(run(pool, env, "tests.callables:sleep_then_pid", seconds=2) for _ in range(3))
    )
    pids = [o.result["pid"] for o in outcomes]  # type: ignore[index]
    assert all(o.success for o in outcomes)
    assert sorted(pids[:2]) == sorted(members)
    assert pids[2] not in members


@pytest.mark.timeout(300)
async def test_a_tools_task_is_a_ray_task_never_queued_behind_a_member(
    ray_cluster: Cluster,
) -> None:
    """A tool may run for minutes: its task is a Ray task even while both members are free, so
    no other process's call queues behind it (and none of its calls queues behind another's)."""
    env = ray_cluster.env
    members = await member_pids(env)
    task = TaskDef(
        id="t",
        actions=[TaskAction(kind="python", params={"callable": "tests.callables:worker_pid"})],
    )
    outcome = await runner(env).run(task, {}, TaskContext(settings_env=env))
    assert outcome.success, outcome
    assert outcome.result["pid"] not in members  # type: ignore[index]


@pytest.mark.timeout(360)
async def test_a_task_that_ends_its_process_fails_alone_and_the_pool_heals(
    ray_cluster: Cluster,
) -> None:
    env = ray_cluster.env
    before = await member_pids(env)
    pool = runner(env)
    killed, beside = await asyncio.gather(
        run(pool, env, "tests.callables:kill_process"),
        run(pool, env, "tests.callables:sleep_then_pid", seconds=1),
        return_exceptions=True,
    )
    assert isinstance(killed, RetryableError), killed
    assert "executor process stopped" in killed.message
    assert isinstance(beside, TaskOutcome) and beside.success  # the other member's task
    survivor = beside.result["pid"]  # type: ignore[index]
    deadline = time.monotonic() + 120
    while True:  # Ray restarts the member: the pool is whole again, with one new process
        try:
            after = await member_pids(env)
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.5)
    assert survivor in after and len(set(after)) == len(before)
    assert len(set(after) - set(before)) == 1
    assert {await pid_of(pool, env) for _ in range(4)} == set(after)


@pytest.mark.timeout(300)
async def test_a_spinning_task_stops_at_the_time_limit_on_its_member(
    ray_cluster: Cluster,
) -> None:
    env = {**ray_cluster.env, "WONDER_ACTION_TIMEOUT_S": "2"}
    before = await member_pids(env)
    pool = runner(env)
    outcome = await run(pool, env, "tests.callables:spin")
    assert not outcome.success and outcome.error is not None
    assert outcome.error.code == "TIMEOUT" and "longer than 2s" in outcome.error.message
    assert {await pid_of(pool, env) for _ in range(2)} == set(before)  # no process was lost
    assert await member_pids(env) == before


@pytest.mark.timeout(300)
async def test_a_task_that_exhausts_its_memory_fails_alone_on_its_member(
    ray_cluster: Cluster,
) -> None:
    env = {**ray_cluster.env, "WONDER_EXECUTOR_MEMORY_LIMIT_MB": "256"}
    before = await member_pids(env)
    pool = runner(env)
    outcome = await run(pool, env, "tests.callables:hog_memory", mb=1024)
    assert not outcome.success and outcome.error is not None
    assert "ran out of memory" in outcome.error.message
    small = await run(pool, env, "tests.callables:hog_memory", mb=64)
    assert small.success and small.result == {"held_mb": 64}
    assert await member_pids(env) == before
