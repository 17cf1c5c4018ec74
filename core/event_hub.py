"""The conversation events hub: writers hand it what they appended (and the token deltas of
replies in flight); processes holding subscribers hear of the conversations they watch.

Plain Python; ``cluster`` makes it the named detached actor ``conversation-events`` (one per
cluster). It is a relay, not a record: the store holds every durable event, so a listener that
lost frames (the hub restarted — a new ``epoch`` —, its backlog overflowed, it was forgotten
after ``LISTENER_TTL_S`` without polling) reads them from the store (``core.event_feed``). No
writer waits for it: a publish is fire-and-forget. It keeps the tokens of each reply in flight
(``PartialReplies``), so a process that starts watching mid-reply shows the reply so far.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from core.event_order import PartialReplies
from core.ids import new_id
from core.jsontypes import JsonObject

LISTENER_TTL_S = 120.0  # a listener that has not polled for this long is forgotten
LISTENER_BACKLOG = 20_000  # frames held for one listener before it is told to read the store
SWEEP_EVERY_S = 10.0

Batch = tuple[str, list[JsonObject]]  # a conversation and frames published for it


@dataclass(frozen=True, slots=True)
class HubWatch:
    """The answer to a watch: the hub's epoch and the conversation's replies in flight."""

    epoch: str
    tokens: list[JsonObject]


@dataclass(frozen=True, slots=True)
class HubDelivery:
    """The answer to a poll: frames by conversation, in publish order. ``lost``: frames were
    dropped for this listener (read the store); ``known`` False: the hub does not know this
    listener (it restarted or forgot it: watch again)."""

    epoch: str
    frames: list[Batch]
    lost: bool = False
    known: bool = True


@dataclass
class _Listener:
    seen: float
    watched: set[str] = field(default_factory=set)
    pending: deque[Batch] = field(default_factory=deque)
    size: int = 0
    lost: bool = False
    polling: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class EventHub:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, backlog: int = LISTENER_BACKLOG
    ) -> None:
        self.epoch = new_id("hub")
        self._clock = clock
        self._backlog = backlog
        self._listeners: dict[str, _Listener] = {}
        self._watchers: dict[str, set[str]] = {}
        self._partials = PartialReplies(clock)
        self._swept = clock()
        self.published = 0

    async def publish(self, batches: list[Batch]) -> None:
        """Frames writers published, by conversation, in the order they were written."""
        for conversation_id, frames in batches:
            self.published += len(frames)
            for frame in frames:
                self._partials.observe(conversation_id, frame)
            for listener_id in self._watchers.get(conversation_id, ()):
                self._offer(self._listeners[listener_id], conversation_id, frames)
        self._sweep()

    def _offer(self, listener: _Listener, conversation_id: str, frames: list[JsonObject]) -> None:
        if listener.size + len(frames) > self._backlog:
            listener.pending.clear()
            listener.size = 0
            listener.lost = True
        else:
            listener.pending.append((conversation_id, frames))
            listener.size += len(frames)
        listener.wake.set()

    async def watch(self, listener_id: str, conversation_id: str) -> HubWatch:
        """Hand ``listener_id`` the conversation's frames from now on."""
        listener = self._listeners.get(listener_id)
        if listener is None:
            listener = self._listeners[listener_id] = _Listener(seen=self._clock())
        listener.watched.add(conversation_id)
        self._watchers.setdefault(conversation_id, set()).add(listener_id)
        return HubWatch(self.epoch, self._partials.so_far(conversation_id))

    async def unwatch(self, listener_id: str, conversation_id: str) -> None:
        listener = self._listeners.get(listener_id)
        if listener is not None:
            listener.watched.discard(conversation_id)
        self._stop_watching(listener_id, conversation_id)

    def _stop_watching(self, listener_id: str, conversation_id: str) -> None:
        watchers = self._watchers.get(conversation_id)
        if watchers is not None:
            watchers.discard(listener_id)
            if not watchers:
                del self._watchers[conversation_id]

    async def next(self, listener_id: str, timeout_s: float = 10.0) -> HubDelivery:
        """What was published for the listener's conversations since its last poll; waits up to
        ``timeout_s`` for something (a long poll)."""
        listener = self._listeners.get(listener_id)
        if listener is None:
            return HubDelivery(self.epoch, [], lost=True, known=False)
        listener.polling += 1
        try:
            if not listener.pending and not listener.lost:
                listener.wake.clear()
                try:
                    await asyncio.wait_for(listener.wake.wait(), timeout_s)
                except TimeoutError:
                    pass
            frames, lost = list(listener.pending), listener.lost
            listener.pending.clear()
            listener.size, listener.lost = 0, False
        finally:
            listener.polling -= 1
            listener.seen = self._clock()
        self._sweep()
        return HubDelivery(self.epoch, frames, lost=lost)

    def _sweep(self) -> None:
        """Forget listeners that stopped polling (their process is gone), and stale replies."""
        now = self._clock()
        if now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for listener_id, listener in list(self._listeners.items()):
            if listener.polling == 0 and now - listener.seen > LISTENER_TTL_S:
                for conversation_id in listener.watched:
                    self._stop_watching(listener_id, conversation_id)
                del self._listeners[listener_id]
        self._partials.prune()

    def stats(self) -> JsonObject:
        return {
            "epoch": self.epoch,
            "listeners": len(self._listeners),
            "watched_conversations": len(self._watchers),
            "published": self.published,
        }
