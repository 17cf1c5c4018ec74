"""Names, the one actor factory, and how Ray's failures become Wonder's errors.

Every Wonder actor is a named detached actor in the namespace ``wonder``, created here
(Serve's ``get_controller_impl`` pattern): the actor classes in ``actors/`` are plain Python and
never see ``ray.remote``. The dashboard shows them by these names.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from cluster.niceness import worker_runtime_env
from core.errors import NonRetryableError, RetryableError, WonderError

NAMESPACE = "wonder"
DIRECTORY_NAME = "conversation-directory"
RUNNER_NAME = "async-operations"
RESERVE_NAME = "workflow-reserve"
SCHEDULER_NAME = "cron-scheduler"
HUB_NAME = "conversation-events"


def conversation_actor_name(conversation_id: str) -> str:
    return f"conversation:{conversation_id}"


def workflow_actor_name(run_id: str) -> str:
    return f"workflow:{run_id}"


def workspace_actor_name(conversation_id: str) -> str:
    return f"workspace:{conversation_id}"


def named_detached(cls: type, name: str, *args: Any, **options: Any) -> Any:
    """Get or create the named detached actor ``name`` of ``cls`` in Wonder's namespace.

    Coordination actors take no CPU (they wait on others), restart after a crash (their state is
    in the store), and serve many calls at once (they are async); ``options`` override these.
    """
    defaults: dict[str, Any] = {
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_concurrency": 1000,
    }
    runtime_env = worker_runtime_env()
    if runtime_env is not None:  # created from a raised process: not raised itself
        defaults["runtime_env"] = runtime_env
    remote_cls: Any = ray.remote(cls)
    return remote_cls.options(name=name, **{**defaults, **options}).remote(*args)


def existing_actor(name: str) -> Any | None:
    """The live named actor, or ``None``."""
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def as_wonder_error(exc: BaseException, what: str) -> WonderError:
    """A Ray failure as Wonder's error: the actor's own ``WonderError`` as it was raised,
    anything else that went wrong in Ray (a dead or unreachable actor, a lost worker) retryable."""
    if isinstance(exc, WonderError):
        return exc
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause
        if isinstance(cause, WonderError):
            return cause
        if isinstance(cause, asyncio.CancelledError | ray.exceptions.TaskCancelledError):
            return RetryableError(f"{what} was cancelled")
        return NonRetryableError(f"{what} failed: {type(cause).__name__}: {cause}"[:1000])
    return RetryableError(f"{what}: {type(exc).__name__}: {exc}"[:1000])
