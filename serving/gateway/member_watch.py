"""Open WebSockets by the member that opened them: a user who loses its membership loses its
streams.

A stream opened as a user (``X-Wonder-User``, ``?user_id=``, or a stream ticket naming one) is
kept by (conversation, user). Revoking a member through a replica closes that replica's streams of
the pair at once (``refuse``); a revocation through another replica is found by the poll of
``StreamWatch`` every ``MEMBER_RECHECK_S``. A stream's messages are also checked against the
member's level as they arrive, so a revoked member never posts.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.store import Store
from serving.gateway.stream_watch import OnRefused, StreamWatch

MEMBER_RECHECK_S = 1.0

Pair = tuple[str, str]  # (conversation id, user id)


class MemberWatch(StreamWatch[Pair]):
    """One replica's open streams, by (conversation, user)."""

    def __init__(self, store: Store, recheck_s: float = MEMBER_RECHECK_S) -> None:
        super().__init__(store, recheck_s)

    def watching(
        self, conversation_id: str, user: str, on_refused: OnRefused
    ) -> AbstractContextManager[None]:
        """While inside, ``on_refused(reason)`` is awaited once ``user`` is no longer a member
        of the conversation."""
        return self._watching((conversation_id, user), on_refused)

    def open_streams(self, conversation_id: str, user: str) -> int:
        return self._open_streams((conversation_id, user))

    async def refuse(self, conversation_id: str, user: str, reason: str) -> None:
        """Close every open stream of ``user`` on the conversation on this replica."""
        await self._refuse((conversation_id, user), reason)

    async def refusals(self, grants: list[Pair]) -> dict[Pair, str]:
        """Users no longer members of the conversation."""
        present = await run_in_threadpool(self.store.members.present, grants)
        return {
            (conversation_id, user): (
                f"user {user} is no longer a member of conversation {conversation_id}"
            )
            for conversation_id, user in grants
            if (conversation_id, user) not in present
        }


def get_member_watch(connection: HTTPConnection) -> MemberWatch:
    """The app's ``MemberWatch`` (made on first use)."""
    state = connection.app.state
    watch: MemberWatch | None = getattr(state, "member_watch", None)
    if watch is None:
        watch = MemberWatch(state.gateway.store)
        state.member_watch = watch
    return watch
