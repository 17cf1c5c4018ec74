"""Which replica each conversation's requests went to, and how many requests this process has
in flight on each replica (``last_route``, ``in_flight``).

Kept out of ``serving.llm_routing``: Serve pickles a request router's module by value, so a
module-level object there would be copied into each router instead of shared with the process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_REMEMBERED = 10_000
"""Conversations whose last replica a log remembers (least recently routed forgotten first)."""


class RouteLog:
    """Which replica each session's last request went to (bounded, thread-safe: Serve routes on
    its own event loop thread)."""

    def __init__(self, capacity: int = MAX_REMEMBERED) -> None:
        self._routes: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def record(self, session_id: str, replica: str) -> None:
        with self._lock:
            self._routes[session_id] = replica
            self._routes.move_to_end(session_id)
            while len(self._routes) > self._capacity:
                self._routes.popitem(last=False)

    def get(self, session_id: str) -> str | None:
        with self._lock:
            return self._routes.get(session_id)


ROUTES = RouteLog()
"""This process's routes, over every LLM deployment (replica unique ids are unique)."""


def last_route(session_id: str) -> str | None:
    """The unique id of the replica this process last sent ``session_id``'s request to."""
    return ROUTES.get(session_id)


class InFlight:
    """Requests sent and not yet finished, per replica (thread-safe)."""

    def __init__(self) -> None:
        self._requests: dict[str, str] = {}  # internal request id → replica unique id
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def started(self, request_id: str, replica: str) -> None:
        with self._lock:
            self._forget(request_id)  # a retry after a rejection: counted once, where it went
            self._requests[request_id] = replica
            self._counts[replica] = self._counts.get(replica, 0) + 1

    def finished(self, request_id: str) -> None:
        with self._lock:
            self._forget(request_id)

    def count(self, replica: str) -> int:
        with self._lock:
            return self._counts.get(replica, 0)

    def _forget(self, request_id: str) -> None:
        replica = self._requests.pop(request_id, None)
        if replica is not None:
            left = self._counts.get(replica, 0) - 1
            if left > 0:
                self._counts[replica] = left
            else:
                self._counts.pop(replica, None)


IN_FLIGHT = InFlight()
"""This process's requests in flight per replica, over every LLM deployment."""


def in_flight(replica: str) -> int:
    """How many requests this process has sent to ``replica`` that have not finished."""
    return IN_FLIGHT.count(replica)
