"""Open WebSockets by the member that opened them: a user who loses its membership loses its
streams.

A stream opened as a user (``X-Wonder-User``, ``?user_id=``, or a stream ticket naming one) is
checked once, when it opens, and may stay open for hours. So each replica keeps its open streams
by (conversation, user). Revoking a member through a replica closes that replica's streams of the
pair at once (``refuse``); a revocation through another replica is found by a poll of the store
every ``MEMBER_RECHECK_S`` while any such stream is open (one query for all of a replica's pairs,
not one per stream). A stream's messages are also checked against the member's level as they
arrive, so a revoked member never posts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.store import Store

logger = logging.getLogger("wonder.gateway")

MEMBER_RECHECK_S = 1.0

OnRefused = Callable[[str], Awaitable[None]]
Pair = tuple[str, str]  # (conversation id, user id)


class MemberWatch:
    """One replica's open streams, by (conversation, user), and the poll that closes those
    whose user is no longer a member."""

    def __init__(self, store: Store, recheck_s: float = MEMBER_RECHECK_S) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._streams: dict[Pair, set[OnRefused]] = {}
        self._poll: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, conversation_id: str, user: str, on_refused: OnRefused) -> Iterator[None]:
        """While inside, ``on_refused(reason)`` is awaited once ``user`` is no longer a member
        of the conversation."""
        pair = (conversation_id, user)
        self._streams.setdefault(pair, set()).add(on_refused)
        if self._poll is None or self._poll.done():
            self._poll = asyncio.get_running_loop().create_task(self._run_poll())
        try:
            yield
        finally:
            streams = self._streams.get(pair)
            if streams is not None:
                streams.discard(on_refused)
                if not streams:
                    del self._streams[pair]

    def open_streams(self, conversation_id: str, user: str) -> int:
        return len(self._streams.get((conversation_id, user), ()))

    async def refuse(self, conversation_id: str, user: str, reason: str) -> None:
        """Close every open stream of ``user`` on the conversation on this replica."""
        for on_refused in list(self._streams.get((conversation_id, user), ())):
            await on_refused(reason)

    async def _run_poll(self) -> None:
        while self._streams:
            await asyncio.sleep(self.recheck_s)
            try:
                await self.check_now()
            except Exception:  # the store was unreachable: the next poll tries again
                logger.exception("checking the members of open streams failed")

    async def check_now(self) -> None:
        """Close the streams of every watched user that is no longer a member."""
        pairs = list(self._streams)
        if not pairs:
            return
        present = await run_in_threadpool(self.store.members.present, pairs)
        for conversation_id, user in pairs:
            if (conversation_id, user) not in present:
                reason = f"user {user} is no longer a member of conversation {conversation_id}"
                await self.refuse(conversation_id, user, reason)


def get_member_watch(connection: HTTPConnection) -> MemberWatch:
    """The app's ``MemberWatch`` (made on first use)."""
    state = connection.app.state
    watch: MemberWatch | None = getattr(state, "member_watch", None)
    if watch is None:
        watch = MemberWatch(state.gateway.store)
        state.member_watch = watch
    return watch
