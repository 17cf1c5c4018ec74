"""A replica's open WebSockets by what authorised them, and the poll that closes refused ones.

A stream is authorised once, when it opens, and may stay open for hours. So each replica keeps its
open streams by what authorised them (an API key, a conversation membership). Revoking through a
replica closes that replica's streams at once (``refuse``); a revocation elsewhere (another replica,
the CLI) or an expiry is found by a poll of the store every ``recheck_s`` while any stream is open:
one query for all of a replica's streams, not one per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Generic, TypeVar

from core.store import Store

logger = logging.getLogger("wonder.gateway")

OnRefused = Callable[[str], Awaitable[None]]
K = TypeVar("K", bound=Hashable)


class StreamWatch(ABC, Generic[K]):
    """Open streams by grant ``K``; ``refusals`` says which grants stopped working, and why."""

    def __init__(self, store: Store, recheck_s: float) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._streams: dict[K, set[OnRefused]] = {}
        self._poll: asyncio.Task[None] | None = None

    @abstractmethod
    async def refusals(self, grants: list[K]) -> dict[K, str]:
        """The grants among ``grants`` that no longer hold, each with the reason."""

    def released(self, grant: K) -> None:
        """Called when the last open stream of ``grant`` closes."""

    @contextlib.contextmanager
    def _watching(self, grant: K, on_refused: OnRefused) -> Iterator[None]:
        self._streams.setdefault(grant, set()).add(on_refused)
        if self._poll is None or self._poll.done():
            self._poll = asyncio.get_running_loop().create_task(self._run_poll())
        try:
            yield
        finally:
            streams = self._streams.get(grant)
            if streams is not None:
                streams.discard(on_refused)
                if not streams:
                    del self._streams[grant]
                    self.released(grant)

    def _open_streams(self, grant: K) -> int:
        return len(self._streams.get(grant, ()))

    async def _refuse(self, grant: K, reason: str) -> None:
        for on_refused in list(self._streams.get(grant, ())):
            await on_refused(reason)

    async def _run_poll(self) -> None:
        while self._streams:
            await asyncio.sleep(self.recheck_s)
            try:
                await self.check_now()
            except Exception:  # the store was unreachable: the next poll tries again
                logger.exception("checking the grants of open streams failed (%s)", type(self))

    async def check_now(self) -> None:
        """Close the streams of every watched grant that no longer holds."""
        grants = list(self._streams)
        if not grants:
            return
        for grant, reason in (await self.refusals(grants)).items():
            await self._refuse(grant, reason)
