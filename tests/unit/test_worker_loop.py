"""An executor worker runs each task on an event loop it keeps between tasks
(``cluster.executor.run_to_end``, issue 10), and still ends each task as ``asyncio.run`` would:
what it left running is cancelled, and a task interrupted from outside leaves no loop behind."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cluster.executor import run_to_end


def on_a_thread(check: Callable[[], Any]) -> None:
    """Run ``check`` on a thread of its own (a worker's loop is per thread), re-raising."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            check()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the check did not end"
    if failures:
        raise failures[0]


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


async def interrupted() -> None:
    raise KeyboardInterrupt  # what ray.cancel raises in a running task


def test_tasks_share_a_loop_and_leave_nothing_running() -> None:
    def check() -> None:
        cancelled = threading.Event()

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        async def leaves_work_behind() -> asyncio.AbstractEventLoop:
            asyncio.get_running_loop().create_task(forever())
            await asyncio.sleep(0)
            return asyncio.get_running_loop()

        loop = run_to_end(leaves_work_behind())
        assert cancelled.is_set() and not asyncio.all_tasks(loop)
        assert run_to_end(running_loop()) is loop

        async def numbers() -> AsyncIterator[int]:
            yield 1
            yield 2

        async def with_a_generator() -> list[int]:
            return [n async for n in numbers()]

        for _ in range(2):  # async generators work task after task, without a warning
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert run_to_end(with_a_generator()) == [1, 2]

        async def fails() -> None:
            raise ValueError("a task's own error")

        with pytest.raises(ValueError):
            run_to_end(fails())
        assert run_to_end(running_loop()) is loop  # an error of the task keeps the loop

        with pytest.raises(KeyboardInterrupt):
            run_to_end(interrupted())
        assert loop.is_closed()
        fresh = run_to_end(running_loop())
        assert fresh is not loop and not fresh.is_closed()
        with pytest.raises(KeyboardInterrupt):
            run_to_end(interrupted())  # closes the fresh loop too: nothing left open
        assert fresh.is_closed()

    on_a_thread(check)
