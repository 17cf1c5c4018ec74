"""Which executor pool member runs the next task (pure: no I/O, no Ray).

The pool (``cluster.executor_pool``) is a few long-lived executor processes, each running one
task at a time. A caller process keeps how many of its own tasks each member is running
(``in_flight``) and sends the next one to a member it is not using; when it is using them all
(or the pool is empty), the task runs as a Ray task instead. Only hooks' tasks use the pool
(``cluster.executor_pool`` says why). Among free members the choice rotates from a per-process
starting point, so callers in different processes spread over the members.
"""

from __future__ import annotations

from collections.abc import Sequence


def choose_member(in_flight: Sequence[int], turn: int) -> int | None:
    """The member for the next task: the first free one at or after ``turn`` (modulo the pool's
    size); ``None`` when every member runs one of this caller's tasks (or there are none)."""
    size = len(in_flight)
    for step in range(size):
        index = (turn + step) % size
        if in_flight[index] == 0:
            return index
    return None
