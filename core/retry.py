"""The one retry helper: retries ``RetryableError`` (and timeouts) with the given backoffs.

Every retry in Wonder goes through ``with_retries`` with one of the policies below (or a tool's own
``retry`` settings); there is no other retry loop. Backoffs come from ARCHITECTURE.md §5: context
assembly 100/200/400 ms with a 30 s timeout per attempt, LLM calls 500 ms/1 s/2 s with 120 s. Calls
to actors retry on infrastructure errors only (a dead, restarting or hibernating actor), and a
delivery that exhausts its retries raises: callers turn that into a visible failure, never silence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from core.errors import RetryableError, Timeout

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all; ``backoffs_s[i]`` after failed attempt ``i + 1``; a timeout per
    attempt (``None``: the attempt may take as long as it takes, e.g. a whole turn)."""

    attempts: int
    backoffs_s: Sequence[float]
    timeout_s: float | None

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed ``attempt`` (1-based)."""
        if not self.backoffs_s:
            return 0.0
        return self.backoffs_s[min(attempt - 1, len(self.backoffs_s) - 1)]

    @classmethod
    def exponential(cls, attempts: int, first_ms: int, timeout_ms: int) -> RetryPolicy:
        return cls(attempts, [first_ms / 1000 * 2**i for i in range(attempts)], timeout_ms / 1000)


CONTEXT_ASSEMBLY = RetryPolicy(3, (0.1, 0.2, 0.4), 30.0)
LLM_CALL = RetryPolicy(3, (0.5, 1.0, 2.0), 120.0)
MEMORY_EXTRACTION = RetryPolicy(3, (0.1, 0.2, 0.4), 60.0)
ACTOR_CALL = RetryPolicy(8, (0.05, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0), None)
"""A call to a named actor: tried again (re-activated) when the actor died, is restarting or was
being evicted — eight attempts over about sixteen seconds: a restart takes a worker process, and
an actor whose node was lost restarts only once Ray has declared the node dead (about 1.5 s with
the health-check settings `wonder up` and the deployment files use, about 15 s with Ray's
defaults; docs/deploy.md "Losing a node"), tests/cluster/test_node_loss.py."""
STORE_OUTAGE = RetryPolicy(64, (0.2, 0.5, 1.0, 2.0, 5.0), None)
"""Recording a turn's failure after the store went away mid-turn: tried again for about five
minutes (a database restart, a failover) before the turn is left to the next activation."""
DELIVERY = RetryPolicy(8, (0.2, 0.4, 0.8, 1.6, 3.2, 5.0), None)
"""Handing a finished async operation to its conversation (which may be restarting)."""


async def with_retries(
    policy: RetryPolicy,
    attempt: Callable[[], Awaitable[T]],
    on_retry: Callable[[int, Exception], Awaitable[None]] | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, raises a non-retryable error, or attempts run out.

    ``on_retry(number, error)`` runs before the backoff that follows failed attempt ``number``.
    The last error is raised when every attempt failed.
    """
    last: Exception | None = None
    for number in range(1, policy.attempts + 1):
        try:
            if policy.timeout_s is None:
                return await attempt()
            return await asyncio.wait_for(attempt(), timeout=policy.timeout_s)
        except TimeoutError:
            last = Timeout(f"attempt {number} timed out after {policy.timeout_s}s")
        except RetryableError as exc:
            last = exc
        if number < policy.attempts:
            if on_retry is not None:
                await on_retry(number, last)
            await asyncio.sleep(policy.backoff(number))
    assert last is not None
    raise last
