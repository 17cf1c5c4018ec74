"""The executor on Ray: ``execute_task`` (a Ray remote function) and the ``TaskRunner`` adapter.

A task runs in a Ray worker process; the collaborators its actions use (store, chat models, memory)
are built there, once per process, by the services factory the caller passes along: a module-level
function (it travels by reference), or a ``FunctionRef`` naming one, resolved where the task runs.
Processes that only submit tasks (conversation actors, the coordinator) never import the actions
nor what builds their services: ``execute_task`` loads them where it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import ray

from cluster.by_name import FunctionRef
from core.domain import TaskDef
from core.errors import ErrorCode, RetryableError, WonderError
from core.jsontypes import JsonObject
from core.ports import TaskContext, TaskOutcome, failed_outcome
from core.tracing import current_traceparent

if TYPE_CHECKING:
    from actors.actions.registry import ActionServices

ServicesFactory = Callable[[dict[str, str]], "ActionServices"]
T = TypeVar("T")


@ray.remote(num_cpus=0, max_retries=0)
def execute_task(
    task_json: str,
    task_input: JsonObject,
    context: TaskContext,
    services: ServicesFactory | FunctionRef,
) -> TaskOutcome:
    """Ray entry point: run a task definition (JSON) in a worker process (``run_here``)."""
    return run_here(task_json, task_input, context, services)


def run_here(
    task_json: str,
    task_input: JsonObject,
    context: TaskContext,
    services: ServicesFactory | FunctionRef,
) -> TaskOutcome:
    """Run a task definition (JSON) in this process: a Ray task's worker, or a member of the
    executor pool (``cluster.executor_pool``).

    The task may grow the process's memory by ``executor_memory_limit_mb`` at most: past it,
    allocations fail (``MemoryError``) and the task fails alone, the process stays.
    """
    # Loaded here, in the worker: the actions pull in httpx, pyarrow and numpy (≈ 50 MiB), which a
    # conversation actor submitting a task must not pay for.
    from actors.executor import run_task

    task = TaskDef.model_validate_json(task_json)
    factory = (
        cast(ServicesFactory, services.resolve()) if isinstance(services, FunctionRef) else services
    )
    ready = factory(context.settings_env)
    try:
        with memory_limit(ready.settings.executor_memory_limit_mb):
            return run_to_end(run_task(task, task_input, context, ready))
    except MemoryError:
        limit = ready.settings.executor_memory_limit_mb
        return failed_outcome(
            ErrorCode.EXECUTION_FAILED, f"task {task.id} ran out of memory (limit +{limit} MB)"
        )


_worker = threading.local()


def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on this thread's event loop, kept from one task to the next.

    ``asyncio.run`` makes and closes a loop per task, ≈ 0.3 ms of each hook on a turn's path
    (issue 10). As with ``asyncio.run``, what the task left running is cancelled when it ends;
    a loop interrupted from outside (``ray.cancel`` raises ``KeyboardInterrupt`` in the task) is
    closed, its async generators first, and the next task gets a new one.
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_worker, "loop", None)
    if loop is None or loop.is_closed():
        loop = _worker.loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # interrupted from outside: the next task starts afresh
            _worker.loop = None
        raise
    finally:
        _cancel_leftovers(loop)
        if _worker.loop is not loop:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    left = asyncio.all_tasks(loop)
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


MIB = 1024 * 1024


def data_segment_bytes() -> int | None:
    """This process's data segment (``VmData``: what RLIMIT_DATA counts), None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@contextlib.contextmanager
def memory_limit(extra_mb: int | None) -> Iterator[None]:
    """Let the block grow the data segment by ``extra_mb`` at most (RLIMIT_DATA's soft limit,
    restored after). Shared mappings (Ray's object store) do not count; heap, anonymous maps and
    thread stacks do."""
    current = data_segment_bytes() if extra_mb is not None else None
    if extra_mb is None or current is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = current + extra_mb * MIB
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


# How long a cancelled task may take to stop on its interrupt before its worker is killed.
CANCEL_GRACE_S = 2.0
_escalations: set[asyncio.Task[None]] = set()


def cancel_task(ref: Any) -> None:
    """Cancel a submitted task (``execute_task``): interrupted first (``KeyboardInterrupt`` in its
    worker); one still running ``CANCEL_GRACE_S`` later is stopped with its worker process
    (``force``), so a cancelled task never runs on to its end, whatever it does with the
    interrupt."""
    ray.cancel(ref)
    escalation = asyncio.get_running_loop().create_task(_escalate(ref))
    _escalations.add(escalation)
    escalation.add_done_callback(_escalations.discard)


async def _escalate(ref: Any) -> None:
    done = asyncio.wrap_future(ref.future())
    finished, _ = await asyncio.wait({done}, timeout=CANCEL_GRACE_S)
    if not finished:
        with contextlib.suppress(Exception):  # it ended meanwhile
            ray.cancel(ref, force=True)
    else:
        with contextlib.suppress(BaseException):
            done.result()  # retrieved: nobody awaits it any more


async def task_outcome(ref: Any, task_id: str, *, actor_call: bool = False) -> TaskOutcome:
    """Await a submitted task (``execute_task``, or with ``actor_call`` an async actor's call that
    runs one): the task's own ``WonderError`` as it was raised, Ray's failures as retryable errors.
    A cancelled caller cancels the task (``cancel_task``), or the call (Ray cancels the actor's
    awaiting coroutine, which cancels its task in turn)."""
    try:
        outcome: TaskOutcome = await ref
    except asyncio.CancelledError:
        if actor_call:
            ray.cancel(ref)
        else:
            cancel_task(ref)
        raise
    except ray.exceptions.RayTaskError as exc:
        raise task_error(exc, task_id) from None
    except ray.exceptions.RayError as exc:
        raise RetryableError(f"task {task_id} could not run: {exc}") from exc
    return outcome


def task_error(exc: ray.exceptions.RayTaskError, task_id: str) -> WonderError:
    """A task that raised: its own ``WonderError`` as it was raised, anything else retryable."""
    cause = exc.cause
    if isinstance(cause, WonderError):
        return cause
    return RetryableError(f"task {task_id} failed: {cause}")


def with_traceparent(context: TaskContext) -> TaskContext:
    """The caller's span travels with the task, explicitly."""
    if context.traceparent is not None:
        return context
    return context.model_copy(update={"traceparent": current_traceparent()})


class RayTaskRunner:
    """``TaskRunner`` over ``execute_task`` submitted from this process: Ray's failures become
    retryable errors."""

    def __init__(self, services: ServicesFactory | FunctionRef, **options: object) -> None:
        self._services = services
        self._remote = execute_task.options(**options) if options else execute_task

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        context = with_traceparent(context)
        ref = self._remote.remote(task.model_dump_json(), task_input, context, self._services)
        return await task_outcome(ref, task.id)
