"""The executor's dispatchers: one actor per node submits the executor tasks of every caller there.

Ray reuses a task worker only among tasks under the same root detached actor (since Ray 2.40 a
worker that ran a task submitted from detached actor A is never given one rooted in detached actor
B). Conversation actors, workflow coordinators and the async-operations runner are all detached
actors, so each one's first task started a worker process of its own and imported the executor's
services there: about 2 s to start the process and 4 s of imports on a 2-core machine, on the
first tool call of every conversation, and one more idle process per conversation until Ray
reaped it.

Submitted from the node's dispatcher (``executor-dispatch:<node id>``, a named detached async
actor on that node), the tasks of every caller on the node share one root, so a warm worker runs
the next conversation's tool at once, and the task still runs beside its caller (Ray places it from
the dispatcher's node, as it did from the caller's). The dispatcher only forwards: it submits
``execute_task`` and awaits it, many calls at once; the containment of a task is the executor's
(``run_here``: its own process, memory and time limits). A caller that cancels its call cancels the
task: Ray cancels the awaiting coroutine of an async actor's call, which cancels the task. If a
dispatcher dies, its calls in flight fail retryably and the next call makes a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from cluster.by_name import FunctionRef
from cluster.executor import ServicesFactory, execute_task, task_outcome, with_traceparent
from cluster.naming import named_detached
from cluster.placement import NODE_ID_LABEL
from core.domain import TaskDef
from core.errors import RetryableError
from core.jsontypes import JsonObject
from core.ports import TaskContext, TaskOutcome

DISPATCH_PREFIX = "executor-dispatch:"


class ExecutorDispatch:
    """Plain Python; ``dispatch_handle`` makes it the node's named detached actor."""

    async def run(
        self,
        task_json: str,
        task_id: str,
        task_input: JsonObject,
        context: TaskContext,
        services: ServicesFactory | FunctionRef,
        options: dict[str, Any],
    ) -> TaskOutcome:
        ref = execute_task.options(**options).remote(task_json, task_input, context, services)
        return await task_outcome(ref, task_id)


def dispatch_name(node_id: str) -> str:
    return f"{DISPATCH_PREFIX}{node_id}"


def dispatch_handle(node_id: str) -> Any:
    """Get or create the dispatcher of node ``node_id``, on that node."""
    return named_detached(
        ExecutorDispatch,
        dispatch_name(node_id),
        label_selector={NODE_ID_LABEL: node_id},
        # Not restarted by Ray: pinned to its node, it could never start again once the node is
        # lost. A caller whose call failed looks it up (or makes it) again on its next call.
        max_restarts=0,
    )


class DispatchedTaskRunner:
    """``TaskRunner`` through this node's dispatcher: the task's own ``WonderError`` as it was
    raised, Ray's failures (the dispatcher's included) as retryable errors."""

    def __init__(
        self,
        services: ServicesFactory | FunctionRef,
        options: dict[str, Any],
        handle: Callable[[str], Any] = dispatch_handle,
    ) -> None:
        self._services = services
        self._options = options
        self._handle_of = handle
        self._handle: Any | None = None

    def _dispatcher(self) -> Any:
        if self._handle is None:
            self._handle = self._handle_of(ray.get_runtime_context().get_node_id())
        return self._handle

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        context = with_traceparent(context)
        dispatcher = self._dispatcher()
        ref = dispatcher.run.remote(
            task.model_dump_json(), task.id, task_input, context, self._services, self._options
        )
        try:
            return await task_outcome(ref, task.id, actor_call=True)
        except RetryableError:
            if self._handle is dispatcher:  # looked up again next time (restarted or replaced)
                self._handle = None
            raise
