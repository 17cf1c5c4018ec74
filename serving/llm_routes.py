"""Which replica each conversation's requests went to, per process (``last_route``).

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
