"""One process's subscriptions to conversations' events, served without the conversations' actors.

A subscription replays the stored events after ``after_seq`` (the store is the source of truth),
then follows what the conversation's writers publish (``FeedSource``: the process hears of every
conversation it watches, whoever wrote it, resident actor or not). Each subscription hands out
durable events once and in order (``SeqOrder``): what it heard of late or never (a publish lost
with its process, a full inbox) is read from the store first. Token deltas pass as they come,
coalesced when the subscriber falls behind; a subscriber arriving mid-reply gets the reply's
tokens so far. A conversation is watched while at least one subscription in this process follows
it, and no longer: subscribers keep no actor resident, and no actor keeps its subscribers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

from core.event_order import (
    PartialReplies,
    SeqOrder,
    coalesce,
    durable_seq,
    reply_turn,
    visible_frames,
)
from core.jsontypes import JsonObject
from core.store import Store

log = logging.getLogger("wonder.events")

INBOX_LIMIT = 2000  # frames one subscription may hold unread before it reads the store instead
SEQ_CHUNK = 500  # conversations per "last seqs" read of the store poll


class FeedSource(Protocol):
    """How a process hears of the events of the conversations it watches."""

    async def watch(self, conversation_id: str) -> list[JsonObject]:
        """From now on, hand this process the conversation's events; answers the token frames
        of its replies in flight. Never raises: a source that cannot watch now says so later
        (``EventFeed.rewatch``), and the store poll covers the meantime."""
        ...

    def unwatch(self, conversation_id: str) -> None: ...


def subscribed_frame(after_seq: int) -> JsonObject:
    """Says the subscription is live: nothing after it can be missed (not an event: no seq)."""
    return {"seq": None, "type": "subscribed", "after_seq": after_seq}


class _Subscription:
    """One subscriber's unread frames, and what it has been handed."""

    def __init__(self, after_seq: int, limit: int) -> None:
        self.order = SeqOrder(after_seq)
        self.offered = after_seq  # the highest seq this subscription heard of
        self._inbox: deque[JsonObject] = deque()
        self._wake = asyncio.Event()
        self._resync = False
        self._limit = limit

    def offer(self, frames: list[JsonObject]) -> None:
        if len(self._inbox) + len(frames) > self._limit:
            self._inbox.clear()  # read the store instead (the tokens are lost, not the events)
            self._resync = True
        else:
            self._inbox.extend(frames)
        for frame in frames:
            self.offered = max(self.offered, durable_seq(frame) or 0)
        self._wake.set()

    def resync(self) -> None:
        self._resync = True
        self._wake.set()

    async def next_batch(self) -> tuple[bool, list[JsonObject]]:
        """Whether to read the store first, and the frames heard of since the last batch."""
        while not self._inbox and not self._resync:
            self._wake.clear()
            await self._wake.wait()
        resync, self._resync = self._resync, False
        batch = list(self._inbox)
        self._inbox.clear()
        return resync, batch


class EventFeed:
    """This process's subscriptions, by conversation (use it on one event loop)."""

    def __init__(self, store: Store, source: FeedSource, inbox_limit: int = INBOX_LIMIT) -> None:
        self.store = store
        self.source = source
        self.inbox_limit = inbox_limit
        self.partials = PartialReplies()
        self._subs: dict[str, set[_Subscription]] = {}
        self._watching: dict[str, asyncio.Future[list[JsonObject]]] = {}
        self._store_seqs: dict[str, int] = {}  # each watched conversation's last seq, last poll

    def watched(self) -> list[str]:
        return list(self._subs)

    def subscriptions(self) -> int:
        return sum(len(subs) for subs in self._subs.values())

    # ------------------------------------------------------------------ what the source hears

    def deliver(self, conversation_id: str, frames: list[JsonObject]) -> None:
        """Frames a writer published for ``conversation_id`` (on this feed's event loop)."""
        subs = self._subs.get(conversation_id)
        if not subs:
            return
        for frame in frames:
            self.partials.observe(conversation_id, frame)
        for sub in subs:
            sub.offer(frames)

    def resync(self, conversation_ids: Iterable[str] | None = None) -> None:
        """These conversations' subscriptions (all: None) read the store for what they missed
        (the source lost track: its hub restarted, or it could not hear for a while)."""
        for conversation_id in self.watched() if conversation_ids is None else conversation_ids:
            for sub in self._subs.get(conversation_id, ()):
                sub.resync()

    async def rewatch(self) -> None:
        """Watch every followed conversation again (a new hub knows nobody), then catch up."""
        for conversation_id in self.watched():
            tokens = await self.source.watch(conversation_id)
            self.partials.forget(conversation_id)
            self.partials.seed(conversation_id, tokens)
        self.resync()

    async def poll_store(self) -> None:
        """The fallback for publishes lost on the way: a subscription that has still not heard
        of what the store held at the previous poll catches up from the store. What the store
        holds now may be a publish still on its way (a reply's tokens, then its commit's
        events, a few ms behind): reading it now would hand the subscriber a completed turn
        before that turn's tokens."""
        watched = self.watched()
        previous, self._store_seqs = self._store_seqs, {}
        for start in range(0, len(watched), SEQ_CHUNK):
            chunk = watched[start : start + SEQ_CHUNK]
            last = await asyncio.to_thread(self.store.events.last_seqs, chunk)
            self._store_seqs.update(last)
            for conversation_id in chunk:
                behind = previous.get(conversation_id, 0)
                for sub in self._subs.get(conversation_id, ()):
                    if max(sub.offered, sub.order.last_seq) < behind:
                        sub.resync()
        self.partials.prune()

    # ------------------------------------------------------------------ subscribers

    async def subscribe(
        self, conversation_id: str, after_seq: int = 0, *, marker: bool = False
    ) -> AsyncIterator[JsonObject]:
        """The conversation's events after ``after_seq``: stored ones, the tokens of replies in
        flight, then live ones, each durable event once and in order. With ``marker``, a
        ``subscribed`` frame comes first, as soon as nothing after it can be missed."""
        sub = _Subscription(after_seq, self.inbox_limit)
        self._subs.setdefault(conversation_id, set()).add(sub)
        try:
            in_flight = await self._watch(conversation_id)
            if marker:
                yield subscribed_frame(after_seq)
            closed: set[str] = set()
            for frame in await self._read(conversation_id, after_seq, None):
                turn_id = reply_turn(frame)
                if turn_id is not None:
                    closed.add(turn_id)
                sub.order.saw(frame)
                yield frame
            for frame in in_flight:
                if frame.get("turn_id") not in closed:
                    yield frame
            while True:
                # What was heard of first, in order (gaps read from the store), so a reply's
                # tokens still come before its turn's end; then, on a resync, what was not.
                resync, batch = await sub.next_batch()
                for frame in coalesce(batch):
                    if sub.order.is_old(frame):
                        continue
                    gap = sub.order.missing_before(frame)
                    if gap:
                        for missed in await self._read(conversation_id, gap.start - 1, gap.stop):
                            sub.order.saw(missed)
                            yield missed
                    sub.order.saw(frame)
                    yield frame
                if resync:
                    for frame in await self._read(conversation_id, sub.order.last_seq, None):
                        sub.order.saw(frame)
                        yield frame
        finally:
            self._leave(conversation_id, sub)

    async def _watch(self, conversation_id: str) -> list[JsonObject]:
        """Watch the conversation if this process does not yet; its replies in flight."""
        while True:
            watching = self._watching.get(conversation_id)
            if watching is None:
                return await self._first_watch(conversation_id)
            try:
                await asyncio.shield(watching)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                continue  # the first watcher left before its watch was answered: watch anew
            return self.partials.so_far(conversation_id)

    async def _first_watch(self, conversation_id: str) -> list[JsonObject]:
        watching: asyncio.Future[list[JsonObject]] = asyncio.get_running_loop().create_future()
        self._watching[conversation_id] = watching
        try:
            tokens = await self.source.watch(conversation_id)
        except BaseException:
            if self._watching.get(conversation_id) is watching:
                del self._watching[conversation_id]
            watching.cancel()
            raise
        self.partials.forget(conversation_id)
        self.partials.seed(conversation_id, tokens)
        if not watching.done():
            watching.set_result(tokens)
        return tokens

    def _leave(self, conversation_id: str, sub: _Subscription) -> None:
        subs = self._subs.get(conversation_id)
        if subs is None:
            return
        subs.discard(sub)
        if subs:
            return
        del self._subs[conversation_id]
        watching = self._watching.pop(conversation_id, None)
        if watching is not None and not watching.done():
            watching.cancel()
        self.partials.forget(conversation_id)
        self.source.unwatch(conversation_id)

    async def _read(
        self, conversation_id: str, after_seq: int, before_seq: int | None
    ) -> list[JsonObject]:
        return await asyncio.to_thread(
            visible_frames, self.store, conversation_id, after_seq, before_seq
        )
