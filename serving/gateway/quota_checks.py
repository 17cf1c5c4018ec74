"""The gateway's quota shell: reads the clock, the counts and the client's quota, asks
``core.quotas``, and raises ``QuotaExceeded`` (HTTP 429 with ``Retry-After``).

What holds across replicas: the request rate (token buckets) and open WebSockets are counted per
gateway replica, in memory (N replicas admit up to N times the rate; a restarted replica starts with
full buckets); active turns, stored conversations and memories, and the day's tokens are counted
in the store, so every replica sees the same figures (two requests racing at the limit may both
pass). A client's quota is re-read from the store at most every ``QUOTA_CACHE_S`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.errors import QuotaExceeded
from core.ids import utc_now
from core.quotas import (
    Bucket,
    Limit,
    Quota,
    Refusal,
    check_count,
    check_tokens,
    start_of_utc_day,
    take,
)
from core.store import Store

QUOTA_CACHE_S = 2.0


def refused(refusal: Refusal | None) -> None:
    if refusal is not None:
        raise QuotaExceeded(refusal.message, retry_after_s=refusal.retry_after_s)


class QuotaGuard:
    """One replica's quota state: token buckets and open sockets per client, cached quotas."""

    def __init__(
        self,
        store: Store,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.monotonic = monotonic
        self.wall = wall
        self._lock = threading.Lock()  # sync routes run on Starlette's thread pool
        self._buckets: dict[str, Bucket] = {}
        self._sockets: dict[str, int] = {}
        self._quotas: dict[str, tuple[float, Quota]] = {}

    def cached_quota(self, client_id: str) -> Quota | None:
        """The client's quota if cached and fresh (no I/O: safe on the event loop)."""
        cached = self._quotas.get(client_id)
        if cached is not None and self.monotonic() - cached[0] < QUOTA_CACHE_S:
            return cached[1]
        return None

    def quota(self, client_id: str) -> Quota:
        now = self.monotonic()
        cached = self._quotas.get(client_id)
        if cached is not None and now - cached[0] < QUOTA_CACHE_S:
            return cached[1]
        quota = self.store.quotas.get(client_id) or Quota()
        self._quotas[client_id] = (now, quota)
        return quota

    def forget(self, client_id: str) -> None:
        """Drop the cached quota (after it changed through this replica)."""
        self._quotas.pop(client_id, None)
        with self._lock:
            self._buckets.pop(client_id, None)

    def admit_request(self, client_id: str) -> None:
        quota = self.quota(client_id)
        if quota.requests_per_second is None:
            return
        with self._lock:
            bucket, refusal = take(self._buckets.get(client_id), quota, self.monotonic())
            if bucket is not None:
                self._buckets[client_id] = bucket
        refused(refusal)

    @contextmanager
    def websocket(self, client_id: str) -> Iterator[None]:
        """Hold one of the client's concurrent WebSockets for the block (refused when full)."""
        allowed = self.quota(client_id).concurrent_websockets
        with self._lock:
            current = self._sockets.get(client_id, 0)
            refused(check_count(Limit.WEBSOCKETS, current, allowed, "open WebSockets"))
            self._sockets[client_id] = current + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._sockets.get(client_id, 1) - 1
                if left > 0:
                    self._sockets[client_id] = left
                else:
                    self._sockets.pop(client_id, None)

    def admit_turn(self, client_id: str) -> None:
        """Before a message starts a turn: concurrent turns and the day's model tokens."""
        quota = self.quota(client_id)
        if quota.concurrent_turns is not None:
            active = self.store.quotas.active_turns(client_id)
            refused(check_count(Limit.TURNS, active, quota.concurrent_turns, "active turns"))
        if quota.tokens_per_day is not None:
            now = self.wall()
            used = self.store.quotas.tokens_since(client_id, start_of_utc_day(now))
            refused(check_tokens(used, quota.tokens_per_day, now))

    def admit_conversation(self, client_id: str) -> None:
        allowed = self.quota(client_id).conversations
        if allowed is not None:
            stored = self.store.quotas.conversations(client_id)
            refused(check_count(Limit.CONVERSATIONS, stored, allowed, "conversations stored"))

    def memories_allowed(self, client_id: str) -> int | None:
        return self.quota(client_id).memories

    def admit_memory(self, stored: int, allowed: int | None) -> None:
        refused(check_count(Limit.MEMORIES, stored, allowed, "memories stored"))


async def admit_turn(guard: QuotaGuard, client_id: str) -> None:
    """``guard.admit_turn`` off the event loop, skipped when the cached quota limits neither
    turns nor tokens (the usual case: a message's acknowledgement then takes no thread hop)."""
    quota = guard.cached_quota(client_id)
    if quota is not None and quota.concurrent_turns is None and quota.tokens_per_day is None:
        return
    await run_in_threadpool(guard.admit_turn, client_id)


def get_guard(connection: HTTPConnection) -> QuotaGuard:
    """The quota guard of the app serving this request or WebSocket."""
    guard: QuotaGuard = connection.app.state.quotas
    return guard
