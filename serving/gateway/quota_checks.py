"""The gateway's quota shell: reads the clock, the counts and the client's (and user's) quota,
asks ``core.quotas``, and raises ``QuotaExceeded`` (HTTP 429 with ``Retry-After``).

What holds across replicas: the request rate (token buckets, per client and per user) and open
WebSockets are counted per gateway replica, in memory (N replicas admit up to N times the rate; a
restarted replica starts with full buckets); active turns, stored conversations and memories, and
the day's tokens are counted in the store, so every replica sees the same figures (two requests
racing at the limit may both pass). Quotas are re-read from the store at most every
``QUOTA_CACHE_S`` seconds (``core.turn_quotas``), at once after a change made through this replica.
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
    BaseQuota,
    Bucket,
    Limit,
    Quota,
    Refusal,
    check_count,
    refuse_turn,
    take,
    user_scope,
)
from core.store import Store
from core.turn_quotas import StoredQuotas

BucketKey = tuple[str, str | None]  # (client, user): None is the client's own bucket


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
        defaults: Quota | None = None,
    ) -> None:
        self.store = store
        self.monotonic = monotonic
        self.wall = wall
        self.quotas = StoredQuotas(store, monotonic, defaults=defaults)
        self._lock = threading.Lock()  # sync routes run on Starlette's thread pool
        self._buckets: dict[BucketKey, Bucket] = {}
        self._sockets: dict[str, int] = {}

    def quota(self, client_id: str) -> Quota:
        return self.quotas.client(client_id)

    def forget(self, client_id: str) -> None:
        """Drop the cached quotas and buckets (after a change through this replica)."""
        self.quotas.forget(client_id)
        with self._lock:
            for key in [k for k in self._buckets if k[0] == client_id]:
                del self._buckets[key]

    def admit_request(self, client_id: str, user_id: str | None = None) -> None:
        """One request of the client (and of ``user_id``, when it names one with a quota)."""
        self._take((client_id, None), self.quota(client_id), "")
        if user_id is not None:
            user_quota = self.quotas.user(client_id, user_id)
            if user_quota is not None:
                self._take((client_id, user_id), user_quota, user_scope(user_id))

    def _take(self, key: BucketKey, quota: BaseQuota, whose: str) -> None:
        if quota.requests_per_second is None:
            return
        with self._lock:
            bucket, refusal = take(self._buckets.get(key), quota, self.monotonic(), whose)
            if bucket is not None:
                self._buckets[key] = bucket
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

    def admit_turn(self, client_id: str, user_id: str | None = None) -> None:
        """Before a message starts a turn: concurrent turns and the day's model tokens, of the
        client and of ``user_id``."""
        refused(refuse_turn(self.quotas.admission(client_id, user_id, self.wall())))

    def admit_conversation(self, client_id: str) -> None:
        refused(self.quotas.conversation_refusal(client_id))

    def admit_trigger(self, client_id: str) -> None:
        refused(self.quotas.trigger_refusal(client_id))

    def memories_allowed(self, client_id: str) -> int | None:
        return self.quota(client_id).memories

    def admit_memory(self, stored: int, allowed: int | None) -> None:
        refused(check_count(Limit.MEMORIES, stored, allowed, "memories stored"))


async def admit_turn(guard: QuotaGuard, client_id: str, user_id: str | None = None) -> None:
    """``guard.admit_turn`` off the event loop, skipped when the cached quotas limit neither
    turns nor tokens, the client's nor the user's (the usual case: a message's acknowledgement
    then takes no thread hop)."""
    if not guard.quotas.may_limit_turns(client_id, user_id):
        return
    await run_in_threadpool(guard.admit_turn, client_id, user_id)


def get_guard(connection: HTTPConnection) -> QuotaGuard:
    """The quota guard of the app serving this request or WebSocket."""
    guard: QuotaGuard = connection.app.state.quotas
    return guard
