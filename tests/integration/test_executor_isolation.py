"""Executor tasks on real Ray workers cannot take their worker down: a time limit interrupts a
spinning callable (SIGALRM on the worker's main thread) and a memory hog fails alone
(RLIMIT_DATA for the task's duration). ``sys.exit`` over the gateway: test_gateway_security.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster.executor import RayTaskRunner
from cluster.executor_wiring import executor_services
from core.domain import TaskAction, TaskDef
from core.ports import TaskContext, TaskOutcome
from tests.conftest import Cluster


async def run(env: dict[str, str], name: str, **task_input: Any) -> TaskOutcome:
    task = TaskDef(id="t", actions=[TaskAction(kind="python", params={"callable": name})])
    runner = RayTaskRunner(executor_services)
    return await runner.run(task, task_input, TaskContext(settings_env=env))


@pytest.mark.timeout(120)
async def test_a_spinning_callable_stops_at_the_time_limit(ray_cluster: Cluster) -> None:
    env = {**ray_cluster.env, "WONDER_ACTION_TIMEOUT_S": "2"}
    outcome = await run(env, "tests.callables:spin")
    assert not outcome.success and outcome.error is not None
    assert outcome.error.code == "TIMEOUT" and "longer than 2s" in outcome.error.message
    assert (await run(env, "tests.callables:worker_pid")).success


@pytest.mark.timeout(120)
async def test_a_task_that_exhausts_its_memory_fails_alone(ray_cluster: Cluster) -> None:
    env = {**ray_cluster.env, "WONDER_EXECUTOR_MEMORY_LIMIT_MB": "256"}
    outcome = await run(env, "tests.callables:hog_memory", mb=1024)
    assert not outcome.success and outcome.error is not None
    assert "ran out of memory" in outcome.error.message
    small = await run(env, "tests.callables:hog_memory", mb=64)
    assert small.success and small.result == {"held_mb": 64}
