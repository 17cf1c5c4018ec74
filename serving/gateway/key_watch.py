"""Open WebSockets by the key that opened them: a key that stops working closes its streams.

A stream is authenticated once, when it opens; it may stay open for hours. So each replica keeps
its open streams by key id. Revoking a key through a replica closes that replica's streams of
the key at once (``refuse``); a key revoked elsewhere (another replica, ``wonder keys revoke``)
or one whose expiry passes is found by a poll of the store every ``KEY_RECHECK_S`` while any
stream is open (one query for all of a replica's keys, not one per stream). A stream's messages
are also checked against the key as they arrive, so a revoked key never starts a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.ids import utc_now
from core.keys import ApiKey
from core.store import Store

logger = logging.getLogger("wonder.gateway")

KEY_RECHECK_S = 1.0

OnRefused = Callable[[str], Awaitable[None]]


class KeyWatch:
    """One replica's open streams, by key id, and the poll that closes refused ones."""

    def __init__(self, store: Store, recheck_s: float = KEY_RECHECK_S) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._streams: dict[str, set[OnRefused]] = {}
        self._hashes: dict[str, str] = {}
        self._poll: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, key: ApiKey, key_hash: str, on_refused: OnRefused) -> Iterator[None]:
        """While inside, ``on_refused(reason)`` is awaited once ``key`` stops working."""
        self._streams.setdefault(key.id, set()).add(on_refused)
        self._hashes[key.id] = key_hash
        if self._poll is None or self._poll.done():
            self._poll = asyncio.get_running_loop().create_task(self._run_poll())
        try:
            yield
        finally:
            streams = self._streams.get(key.id)
            if streams is not None:
                streams.discard(on_refused)
                if not streams:
                    del self._streams[key.id]
                    self._hashes.pop(key.id, None)

    def open_streams(self, key_id: str) -> int:
        return len(self._streams.get(key_id, ()))

    async def refuse(self, key_id: str, reason: str) -> None:
        """Close every open stream of ``key_id`` on this replica, telling it ``reason``."""
        for on_refused in list(self._streams.get(key_id, ())):
            await on_refused(reason)

    async def _run_poll(self) -> None:
        while self._streams:
            await asyncio.sleep(self.recheck_s)
            try:
                await self.check_now()
            except Exception:  # the store was unreachable: the next poll tries again
                logger.exception("checking the keys of open streams failed")

    async def check_now(self) -> None:
        """Close the streams of every watched key that is revoked, expired or gone."""
        hashes = dict(self._hashes)
        if not hashes:
            return
        found = await run_in_threadpool(self.store.keys.by_hashes, hashes.values())
        now = utc_now()
        for key_id, key_hash in hashes.items():
            key = found.get(key_hash)
            reason = f"API key {key_id} no longer exists" if key is None else key.refusal(now)
            if reason is not None:
                await self.refuse(key_id, reason)


def get_key_watch(connection: HTTPConnection) -> KeyWatch:
    """The app's ``KeyWatch`` (made on first use)."""
    state = connection.app.state
    watch: KeyWatch | None = getattr(state, "key_watch", None)
    if watch is None:
        watch = KeyWatch(state.gateway.store)
        state.key_watch = watch
    return watch
