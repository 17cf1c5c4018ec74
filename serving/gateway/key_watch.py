"""Open WebSockets by the key that opened them: a key that stops working closes its streams.

Revoking a key through a replica closes that replica's streams of the key at once (``refuse``); a
key revoked elsewhere (another replica, ``wonder keys revoke``) or one whose expiry passes is found
by the poll of ``StreamWatch`` every ``KEY_RECHECK_S``. A stream's messages are also checked
against the key as they arrive, so a revoked key never starts a turn.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.ids import utc_now
from core.keys import ApiKey
from core.store import Store
from serving.gateway.stream_watch import OnRefused, StreamWatch

KEY_RECHECK_S = 1.0


class KeyWatch(StreamWatch[str]):
    """One replica's open streams, by key id."""

    def __init__(self, store: Store, recheck_s: float = KEY_RECHECK_S) -> None:
        super().__init__(store, recheck_s)
        self._hashes: dict[str, str] = {}

    def watching(
        self, key: ApiKey, key_hash: str, on_refused: OnRefused
    ) -> AbstractContextManager[None]:
        """While inside, ``on_refused(reason)`` is awaited once ``key`` stops working."""
        self._hashes[key.id] = key_hash
        return self._watching(key.id, on_refused)

    def released(self, grant: str) -> None:
        self._hashes.pop(grant, None)

    def open_streams(self, key_id: str) -> int:
        return self._open_streams(key_id)

    async def refuse(self, key_id: str, reason: str) -> None:
        """Close every open stream of ``key_id`` on this replica, telling it ``reason``."""
        await self._refuse(key_id, reason)

    async def refusals(self, grants: list[str]) -> dict[str, str]:
        """Keys revoked, expired or gone."""
        hashes = {key_id: self._hashes[key_id] for key_id in grants if key_id in self._hashes}
        found = await run_in_threadpool(self.store.keys.by_hashes, hashes.values())
        now = utc_now()
        refused: dict[str, str] = {}
        for key_id, key_hash in hashes.items():
            key = found.get(key_hash)
            reason = f"API key {key_id} no longer exists" if key is None else key.refusal(now)
            if reason is not None:
                refused[key_id] = reason
        return refused


def get_key_watch(connection: HTTPConnection) -> KeyWatch:
    """The app's ``KeyWatch`` (made on first use)."""
    state = connection.app.state
    watch: KeyWatch | None = getattr(state, "key_watch", None)
    if watch is None:
        watch = KeyWatch(state.gateway.store)
        state.key_watch = watch
    return watch
