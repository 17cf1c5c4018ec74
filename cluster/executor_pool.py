"""The executor pool: long-lived executor processes that a turn's hooks run on.

A Ray task needs a worker process, and Ray ends idle workers above its soft limit after a second:
a conversation that runs a hook after a pause waited for a process to start (0.6-1 s). The pool is
``WONDER_EXECUTOR_POOL_SIZE`` named detached actors (``executor:0``, ``executor:1``, ...), started
with the gateway and restarted by Ray when one dies, so a task never waits for a process start
while its member is alive.

Each member is a separate process running one task at a time on its main thread, exactly as a Ray
task worker does: the same ``run_here`` (the memory limit for the task's duration, the action time
limit, ``SIGALRM`` for sync callables, ``SystemExit`` refused), so the executor's containment holds
per task as before. A task that takes its process down (``os._exit``, a crash, the kernel's OOM
killer) fails alone with a retryable error; Ray restarts the member and the next task finds it.

A caller (``PooledTaskRunner``, one per process) sends each hook's task to a member it is not
using (``core.executor_pool.choose_member``); when it is using every member, the task runs as a Ray
task (through the node's dispatcher, ``cluster.executor_dispatch``). Hook tasks from different
processes may queue on one member (each process knows only its own calls): size the pool for the
hooks a node runs at once.

Every other task (a tool's, a workflow node's, an operation's) runs as a Ray task, submitted by the
node's dispatcher so that every caller's tasks share warm workers. A tool may run
for minutes, and a call queued on a member behind another process's tool would wait for it with
no way out: Ray answers ``ray.cancel`` of a queued call to a sync actor with a cancelled result
and still runs the call later, so a caller that gave up and ran it elsewhere would run it twice
(and a conversation restarted after a crash, knowing nothing of its first run still holding a
member, would queue its rerun behind it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Callable
from typing import Any

import ray

from cluster import placement
from cluster.by_name import FunctionRef
from cluster.executor import ServicesFactory, run_here, task_error, with_traceparent
from cluster.naming import named_detached
from core.domain import TaskDef
from core.errors import RetryableError
from core.executor_pool import choose_member
from core.jsontypes import JsonObject
from core.ports import TaskContext, TaskOutcome, TaskRunner
from core.settings import Settings

log = logging.getLogger("wonder.executor")

MEMBER_PREFIX = "executor:"


def member_name(index: int) -> str:
    return f"{MEMBER_PREFIX}{index}"


class ExecutorProcess:
    """One pool member: runs library tasks in its own process, one at a time (a sync actor with
    ``max_concurrency=1``: Ray runs its calls on the process's main thread)."""

    def run(
        self,
        task_json: str,
        task_input: JsonObject,
        context: TaskContext,
        services: ServicesFactory | FunctionRef,
    ) -> TaskOutcome:
        return run_here(task_json, task_input, context, services)

    def pid(self) -> int:
        return os.getpid()


def member_handle(index: int, settings: Settings) -> Any:
    """Get or create pool member ``index`` (placed as executor tasks are)."""
    return named_detached(
        ExecutorProcess,
        member_name(index),
        max_concurrency=1,  # one task at a time, on the main thread (SIGALRM, RLIMIT_DATA)
        max_task_retries=0,  # a task that took its process down is not run again
        **placement.executor_options(settings),
    )


def start_pool(settings: Settings) -> list[Any]:
    """Every member of the pool, created where missing (idempotent; the gateway calls it when
    it starts, so the processes are up before the first turn)."""
    return [member_handle(i, settings) for i in range(settings.executor_pool_size)]


class PooledTaskRunner:
    """``TaskRunner`` over the pool: a hook's task on a member this process is not using, else
    (and every other task) a Ray task.

    Ray's failures become retryable errors, as with ``cluster.executor.task_outcome``. A cancelled
    call runs to its end all the same (bounded by the action time limit; see the module's
    docstring): this process counts the member as busy until it has."""

    def __init__(
        self,
        settings: Settings,
        services: ServicesFactory | FunctionRef,
        overflow: TaskRunner,
        handle: Callable[[int], Any] | None = None,
    ) -> None:
        self._settings = settings
        self._services = services
        self._overflow = overflow
        self._handle_of = handle or (lambda index: member_handle(index, settings))
        size = settings.executor_pool_size
        self._handles: list[Any | None] = [None] * size
        self._in_flight = [0] * size
        self._turn = random.randrange(size) if size else 0

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        index = choose_member(self._in_flight, self._turn) if context.hook is not None else None
        if index is None:
            return await self._overflow.run(task, task_input, context)
        self._turn = index + 1
        context = with_traceparent(context)
        member = self._member(index)
        self._in_flight[index] += 1
        ref = member.run.remote(task.model_dump_json(), task_input, context, self._services)
        done = asyncio.wrap_future(ref.future())
        done.add_done_callback(lambda finished: self._release(index, finished))
        try:
            outcome: TaskOutcome = await asyncio.shield(done)
        except ray.exceptions.RayTaskError as exc:
            raise task_error(exc, task.id) from None
        except ray.exceptions.RayActorError as exc:
            self._forget(index, member)
            raise RetryableError(
                f"task {task.id}: its executor process stopped while running it ({exc})"
            ) from exc
        except ray.exceptions.RayError as exc:
            raise RetryableError(f"task {task.id} could not run: {exc}") from exc
        return outcome

    def _member(self, index: int) -> Any:
        member = self._handles[index]
        if member is None:
            member = self._handles[index] = self._handle_of(index)
        return member

    def _release(self, index: int, finished: asyncio.Future[Any]) -> None:
        self._in_flight[index] -= 1
        if not finished.cancelled():
            finished.exception()  # retrieved: a cancelled caller no longer awaits it

    def _forget(self, index: int, member: Any) -> None:
        """After the member's process died: Ray restarts it under the same handle; a member
        that will not come back (killed for good) is looked up, or created, again next time."""
        if self._handles[index] is member:
            self._handles[index] = None
        log.warning("executor pool member %s stopped during a task", member_name(index))
