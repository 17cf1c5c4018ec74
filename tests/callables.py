"""Callables the test suite registers (``WONDER_LIBRARY_CALLABLES=["tests.callables"]``, set in
tests/conftest.py): misbehaving library code the executor must contain."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from core.callables import library_callable
from core.errors import NonRetryableError


@library_callable
def worker_pid(data: dict[str, Any]) -> dict[str, Any]:
    """The worker process's id (to tell whether a worker survived)."""
    return {"pid": os.getpid()}


@library_callable
def exit_worker(data: dict[str, Any]) -> Any:
    """Call ``sys.exit`` (a Ray task worker would exit)."""
    sys.exit(3)


@library_callable
def interrupt(data: dict[str, Any]) -> Any:
    """Raise ``KeyboardInterrupt``."""
    raise KeyboardInterrupt


@library_callable
def spin(data: dict[str, Any]) -> Any:
    """Busy-loop forever, swallowing ordinary exceptions (only a time limit ends it)."""
    while True:
        try:
            time.sleep(0.01)
        except Exception:
            pass


@library_callable
def hog_memory(data: dict[str, Any]) -> Any:
    """Fill ``mb`` MiB (default 2 GiB), 16 MiB at a time, and keep it."""
    chunk = 16 * 1024 * 1024
    held = [b"\x01" * chunk for _ in range(int(data.get("mb") or 2048) // 16)]
    return {"held_mb": len(held) * 16}


@library_callable
def big_output(data: dict[str, Any]) -> Any:
    """Return ``bytes`` characters of text."""
    return {"text": "x" * int(data.get("bytes") or 0)}


@library_callable
async def count_then_wait(data: dict[str, Any]) -> dict[str, Any]:
    """A tool with an effect to count: append a line to ``path``, then, the first time only,
    wait ``seconds`` (a call a crash can cut). Returns how many times it ran."""
    import asyncio

    args = data.get("input") if isinstance(data.get("input"), dict) else data
    path = str(args["path"])
    with open(path, "a") as f:
        f.write("ran\n")
    with open(path) as f:
        runs = len(f.readlines())
    if runs == 1:
        await asyncio.sleep(float(args.get("seconds") or 30))
    return {"runs": runs}


@library_callable
def fail_times(data: dict[str, Any]) -> dict[str, Any]:
    """Fail with a retryable error the first ``times`` calls (counted in the file at ``path``)."""
    from core.errors import RetryableError

    args = data.get("input") if isinstance(data.get("input"), dict) else data
    with open(str(args["path"]), "a+") as f:
        f.write("ran\n")
        f.seek(0)
        runs = len(f.readlines())
    if runs <= int(args.get("times") or 0):
        raise RetryableError(f"flaky, attempt {runs}")
    return {"runs": runs}


@library_callable
async def record_then_wait(data: dict[str, Any]) -> dict[str, Any]:
    """A tool with an effect to count on every call: append a line to ``path``, then wait
    ``seconds`` (an operation still running when something fails). Returns the lines so far."""
    import asyncio

    args = data.get("input") if isinstance(data.get("input"), dict) else data
    with open(str(args["path"]), "a") as f:
        f.write("ran\n")
    await asyncio.sleep(float(args.get("seconds") or 1))
    with open(str(args["path"])) as f:
        return {"runs": len(f.readlines())}


@library_callable
async def extract_once_slowly(data: dict[str, Any]) -> dict[str, Any]:
    """A memory extraction hook a crash can cut: append the turn id to the file named by
    ``WONDER_TEST_EXTRACTIONS``, then, the first time only, wait 30 s."""
    import asyncio
    import os

    path = os.environ["WONDER_TEST_EXTRACTIONS"]
    with open(path, "a") as f:
        f.write(f"{data.get('turn_id')}\n")
    with open(path) as f:
        runs = len(f.readlines())
    if runs == 1:
        await asyncio.sleep(30)
    return {"runs": runs}


@library_callable
def previous_as_context(data: dict[str, Any]) -> dict[str, Any]:
    """A context-assembly hook's answer: the previous action's ``value`` as system context."""
    previous = data.get("previous") or {}
    return {"system_context": str(previous.get("value"))}


@library_callable
def sleep_then_pid(data: dict[str, Any]) -> dict[str, Any]:
    """Sleep ``seconds`` (default 1), then answer with the process's id."""
    time.sleep(float(data.get("seconds") or 1))
    return {"pid": os.getpid()}


@library_callable
def kill_process(data: dict[str, Any]) -> Any:
    """End the process at once (``os._exit``: no exception to catch, as a crash would)."""
    os._exit(3)


@library_callable
def pending_as_context(data: dict[str, Any]) -> dict[str, Any]:
    """A context-assembly hook's answer: the pending operations it was given, as system context
    (``tool@turn_id`` each)."""
    pending = (data.get("input") or data).get("pending") or []
    seen = ", ".join(f"{p.get('tool')}@{p.get('turn_id')}" for p in pending)
    return {"system_context": f"hook saw pending: {seen or 'none'}"}


@library_callable
def count_runs(data: dict[str, Any]) -> dict[str, Any]:
    """A workflow step with an effect to count: append a line to ``path``; answer ``n + 1`` and
    how many times it ran (the lines in ``path``)."""
    args = data.get("input") if isinstance(data.get("input"), dict) else data
    with open(str(args["path"]), "a+") as f:
        f.write("ran\n")
        f.seek(0)
        runs = len(f.readlines())
    return {"n": int(args.get("n") or 0) + 1, "runs": runs}


@library_callable
async def mark_wait_mark(data: dict[str, Any]) -> dict[str, Any]:
    """Append ``start`` to ``path``, wait ``seconds``, append ``end``: a cancelled call leaves
    ``start`` alone."""
    import asyncio

    with open(str(data["path"]), "a") as f:
        f.write("start\n")
    await asyncio.sleep(float(data.get("seconds") or 10))
    with open(str(data["path"]), "a") as f:
        f.write("end\n")
    return {"done": True}


@library_callable
async def wait_for_file(data: dict[str, Any]) -> dict[str, Any]:
    """Work that takes as long as the test wants: wait until the file ``path`` exists (at most
    ``seconds``, default 300), then answer with its text; a file that says ``fail`` fails the
    call (a business error, ``EXECUTION_FAILED``)."""
    args = data.get("input") if isinstance(data.get("input"), dict) else data
    path = Path(str(args["path"]))
    deadline = time.monotonic() + float(args.get("seconds") or 300)
    while not path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    text = path.read_text().strip() if path.exists() else "timed out"
    if text in ("fail", "timed out"):
        raise NonRetryableError(f"the test said: {text}")
    return {"released": text}
