"""The executor on Ray: ``execute_task`` (a Ray remote function) and the ``TaskRunner`` adapter.

A task runs in a Ray worker process; the collaborators its actions use (store, chat models, memory)
are built there, once per process, by the services factory the caller passes along (a module-level
function, so it travels by reference). Processes that only submit tasks (conversation actors, the
coordinator) never import the actions: ``execute_task`` loads them where it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import ray

from actors.actions.registry import ActionServices
from core.domain import TaskDef
from core.errors import RetryableError, WonderError
from core.jsontypes import JsonObject
from core.ports import TaskContext, TaskOutcome

ServicesFactory = Callable[[dict[str, str]], ActionServices]


@ray.remote(num_cpus=0, max_retries=0)
def execute_task(
    task_json: str, task_input: JsonObject, context: TaskContext, services: ServicesFactory
) -> TaskOutcome:
    """Ray entry point: run a task definition (JSON) in a worker process."""
    # Loaded here, in the worker: the actions pull in httpx, pyarrow and numpy (≈ 50 MiB), which a
    # conversation actor submitting a task must not pay for.
    from actors.executor import run_task

    task = TaskDef.model_validate_json(task_json)
    return asyncio.run(run_task(task, task_input, context, services(context.settings_env)))


class RayTaskRunner:
    """``TaskRunner`` over ``execute_task``: Ray's failures become retryable errors."""

    def __init__(self, services: ServicesFactory, **options: object) -> None:
        self._services = services
        self._options = options

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        remote = execute_task.options(**self._options) if self._options else execute_task
        ref = remote.remote(task.model_dump_json(), task_input, context, self._services)
        try:
            outcome: TaskOutcome = await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, WonderError):
                raise cause from None
            raise RetryableError(f"task {task.id} failed: {cause}") from exc
        except ray.exceptions.RayError as exc:
            raise RetryableError(f"task {task.id} could not run: {exc}") from exc
        return outcome
