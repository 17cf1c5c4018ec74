"""``python``: call a registered library callable — how libraries add their own actions.

``params.callable`` is ``"module:function"`` and must be registered (``core.callables``: the
``@library_callable`` decorator, or the operator's ``WONDER_LIBRARY_CALLABLES``); the gateway
refuses anything else when the task is stored, and the lookup here refuses it again at run time
(a task stored before, or written to the store directly). The function gets the task data (a dict)
and may be sync or async.

A callable cannot take its worker down: ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``
and any exception it raises become a failed result (a business error: the model hears it), and a
sync callable that outlives the action time limit is interrupted by ``SIGALRM`` when the task runs
on its process's main thread (Ray's task workers do; async callables are bounded by the executor's
``asyncio`` timeout instead).
"""

from __future__ import annotations

import contextlib
import inspect
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from actors.actions import ActionContext, JsonObject, action
from core.callables import lookup
from core.errors import ErrorCode, NonRetryableError, WonderError


class ActionTimedOut(BaseException):
    """Raised into a sync callable by the alarm (a ``BaseException``: ``except Exception`` in the
    callable does not swallow it)."""


WORKER_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)


@action("python")
async def python_call(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    settings = ctx.services.settings
    target = params.get("callable")
    if not isinstance(target, str) or not target:
        raise NonRetryableError(
            "python action needs params.callable ('module:function')", code=ErrorCode.INVALID_INPUT
        )
    fn = lookup(target, settings.library_callables)
    return await call_guarded(target, fn, data, settings.action_timeout_s)


async def call_guarded(name: str, fn: Any, data: JsonObject, timeout_s: float) -> Any:
    """Run ``fn(data)``; whatever it raises or however it tries to leave becomes a failed result.

    ``WonderError`` passes through unchanged (its code and retryability are the callable's
    answer); ``asyncio.CancelledError`` passes through (the caller cancelled the task).
    """
    try:
        with alarm(timeout_s):
            result = fn(data)
        if inspect.isawaitable(result):
            result = await result
    except WonderError:
        raise
    except ActionTimedOut:
        raise NonRetryableError(
            f"callable {name} ran longer than {timeout_s:g}s", code=ErrorCode.TIMEOUT
        ) from None
    except WORKER_EXITS as exc:
        raise NonRetryableError(
            f"callable {name} tried to stop the worker ({type(exc).__name__}); refused"
        ) from None
    except MemoryError:
        raise NonRetryableError(f"callable {name} ran out of memory") from None
    except Exception as exc:
        raise NonRetryableError(f"callable {name} failed: {type(exc).__name__}: {exc}") from exc
    return result


@contextlib.contextmanager
def alarm(timeout_s: float) -> Iterator[None]:
    """Interrupt the block with ``ActionTimedOut`` after ``timeout_s`` (main thread only;
    elsewhere signals cannot be delivered and the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise ActionTimedOut

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
