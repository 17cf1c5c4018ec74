"""When a completed turn's memory extraction runs: once its conversation is quiet.

A turn's memory extraction is off the reply's path, but not off the machine: run at once, it
shares the cores, the executor pool and the store's one writer with the conversation's next turn.
In a quick exchange (an agent calling another, a user who sends messages one after another) each
extraction ran beside the next turn and slowed it.

Extractions now wait for a quiet moment: no step of a live turn running for ``quiet_s``
(``WONDER_EXTRACTION_QUIET_S``), then they run one after another, oldest first. One that has
waited ``max_wait_s`` (``WONDER_EXTRACTION_MAX_WAIT_S``) runs even in a conversation that never
quiets, so memories keep up with a busy conversation. A waiting extraction is recorded as pending
in the store since its turn completed: an actor that stops meanwhile leaves it to its next
incarnation, as one cut mid-run. ``quiet_s = 0`` runs each at once (beside the next turn).

Pure: the shell (``actor``) keeps the waiting list, runs what this says, and asks again when a
turn step ends, an extraction ends, or the time it names comes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """An extraction waiting to run, since ``since`` (monotonic seconds)."""

    turn_id: str
    since: float


@dataclass(frozen=True)
class RunNow:
    """Run this turn's extraction now."""

    turn_id: str


@dataclass(frozen=True)
class CheckAt:
    """Nothing to run yet: ask again at ``at`` (monotonic seconds), or when the conversation's
    work changes."""

    at: float


def next_extraction(
    waiting: Sequence[Waiting],
    *,
    now: float,
    quiet_since: float | None,
    quiet_s: float,
    max_wait_s: float,
) -> RunNow | CheckAt | None:
    """What to do with the ``waiting`` extractions (oldest first) at ``now``.

    ``quiet_since``: when the conversation's turns last did something (a message, a step's
    outcome; ``None``: a turn's step is running now).
    ``None`` back: nothing waits."""
    if not waiting:
        return None
    oldest = waiting[0]
    due = oldest.since + max_wait_s
    if now >= due:
        return RunNow(oldest.turn_id)
    if quiet_since is None:
        return CheckAt(due)
    quiet_at = quiet_since + quiet_s
    if now >= quiet_at:
        return RunNow(oldest.turn_id)
    return CheckAt(min(quiet_at, due))
