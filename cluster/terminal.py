"""The ``wonder`` command's terminal holds its own lines: Ray's and Serve's log records go to a
log file the command names, and a long step says it is still going.

Ray configures loggers that write to the terminal when it is imported (``ray``, ``ray.serve``)
and when ``ray.init`` applies the job's logging config (JSON lines on the root logger); without
this module their records interleave with the command's own output.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from typing import TextIO, TypeVar

import ray  # noqa: F401  (imported for its loggers: they exist once Ray and Serve are imported)
from ray import serve  # noqa: F401

T = TypeVar("T")
TICK_S = 15.0


def _terminal_handlers() -> Iterator[logging.StreamHandler[TextIO]]:
    loggers = [logging.getLogger()]
    loggers += [
        item for item in logging.Logger.manager.loggerDict.values()
        if isinstance(item, logging.Logger)
    ]  # fmt: skip
    terminal = {sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__}
    for logger in loggers:
        for handler in logger.handlers:
            if (
                isinstance(handler, logging.StreamHandler)
                # logging's last-resort handler looks up sys.stderr on each record
                and not isinstance(handler, logging.FileHandler | type(logging.lastResort))
                and handler.stream in terminal
            ):
                yield handler


@contextmanager
def logs_to(log: TextIO) -> Iterator[None]:
    """Inside: every log handler writing to the terminal, and any made meanwhile (``ray.init``
    makes its own), writes to ``log`` instead; outside, handlers made inside keep writing there."""
    for handler in _terminal_handlers():
        handler.setStream(log)
    with redirect_stderr(log):
        yield
    for handler in _terminal_handlers():
        handler.setStream(log)


def with_progress(step: Callable[[], T], say: Callable[[str], None], what: str) -> T:
    """Run ``step``, saying every ``TICK_S`` seconds that ``what`` is still going."""
    outcome: dict[str, T] = {}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome["value"] = step()
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=run, name=f"wonder-{what}", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(TICK_S)
        if worker.is_alive():
            say(f"{what}: still going ({time.monotonic() - started:.0f} s)")
    if failure:
        raise failure[0]
    say(f"{what}: done in {time.monotonic() - started:.0f} s")
    return outcome["value"]
