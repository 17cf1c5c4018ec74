"""A conversation's first tool call: tasks submitted from each caller vs through the node's
dispatcher, in one run.

Starts its own local Ray (2 CPUs). Each caller is a named detached actor, as a conversation actor
is, and runs the shipped ``calculate`` tool task twice (its first call and a second right after).
``direct``: the callers submit ``execute_task`` themselves (``RayTaskRunner``); Ray gives each
detached actor's tasks workers of their own, so every caller's first call waits for a process
and the executor's imports. ``dispatched``: the callers go through ``executor-dispatch:<node>``
(``DispatchedTaskRunner``, what the platform does), whose tasks share warm workers. New callers
for each mode, one after the other (nothing else running); the task workers each mode started
are counted from Ray's task records.

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray
from ray.util.state import list_tasks

from benchmarks.harness import local_ray, ms, reporter
from cluster import placement
from cluster.executor import RayTaskRunner
from cluster.executor_dispatch import DispatchedTaskRunner
from cluster.naming import named_detached
from cluster.wiring import EXECUTOR_SERVICES
from core.domain import TaskAction, TaskDef
from core.ports import TaskContext
from core.settings import settings_from_env

progress = reporter("tool_dispatch")


class Caller:
    """A detached actor running a tool task from its own process, as a conversation does."""

    def __init__(self, env: dict[str, str], how: str) -> None:
        self.env = env
        options = placement.executor_options(settings_from_env(env))
        self.runner: Any = (
            DispatchedTaskRunner(EXECUTOR_SERVICES, options)
            if how == "dispatched"
            else RayTaskRunner(EXECUTOR_SERVICES, **options)
        )

    async def call(self) -> float:
        task = TaskDef(
            id="calculate",
            actions=[TaskAction(kind="python", params={"callable": "library.callables:calculate"})],
        )
        started = time.perf_counter()
        outcome = await self.runner.run(
            task, {"expression": "6*7"}, TaskContext(settings_env=self.env)
        )
        assert outcome.success, outcome
        return time.perf_counter() - started


def task_workers(dashboard: str) -> set[int]:
    tasks = list_tasks(
        address=dashboard, filters=[("name", "=", "execute_task")], limit=10_000, detail=True
    )
    return {t.worker_pid for t in tasks if t.worker_pid}


async def run_mode(env: dict[str, str], dashboard: str, how: str, callers: int) -> dict[str, Any]:
    before = task_workers(dashboard)
    first: list[float] = []
    second: list[float] = []
    made = []
    for index in range(callers):
        caller = named_detached(Caller, f"bench-caller:{how}:{index}", env, how)
        made.append(caller)
        await caller.__ray_ready__.remote()
        first.append(await caller.call.remote())
        second.append(await caller.call.remote())
        progress(f"{how}: caller {index + 1}/{callers}: first {first[-1] * 1000:.0f} ms")
    time.sleep(2)  # Ray's task records arrive a moment after the tasks
    started = len(task_workers(dashboard) - before)
    for caller in made:
        ray.kill(caller)
    return {
        "first_call_ms": ms(first),
        "second_call_ms": ms(second),
        "task_workers_started": started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--callers", type=int, default=8, help="new callers per mode")
    args = parser.parse_args()

    with local_ray(progress, dashboard=True) as local:
        env, dashboard = local.env, str(local.dashboard_url)
        load_before = os.getloadavg()[0]
        results = {
            how: asyncio.run(run_mode(env, dashboard, how, args.callers))
            for how in ("direct", "dispatched")
        }
    direct, dispatched = results["direct"], results["dispatched"]
    summary = {
        "benchmark": "tool_dispatch",
        "callers": args.callers,
        **results,
        "first_call_p50_direct_over_dispatched": round(
            direct["first_call_ms"]["p50"] / max(dispatched["first_call_ms"]["p50"], 0.01), 1
        ),
        "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
