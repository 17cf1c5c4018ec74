"""Conversation events on Ray: the hub actor (``conversation-events``), the publisher every
writer's process hands its frames to, and each process's listener that feeds its subscriptions.

A writer (a conversation actor, the gateway's intake, the async-operations runner) publishes
after its commit, fire-and-forget; frames published in one turn of its event loop travel in one
call. Token deltas wait up to ``token_linger_s`` (``WONDER_TOKEN_LINGER_MS``) for company: the
next durable event (which goes at once and takes them along) or more deltas, so a quick reply's
tokens and its commit travel, are relayed and reach a WebSocket as one batch. A process with
subscribers (a gateway replica) runs one listener per event loop: it watches the conversations
its subscriptions follow and long-polls the hub for their frames
(``LONG_POLL_S``); every ``STORE_POLL_S`` it also reads the store's last seqs, and a subscription
that has still not heard of what the store held a poll earlier reads the store (the fallback for a
publish lost with its process). A hub that restarted (a new epoch) or forgot the listener is told
everything again, and the subscriptions catch up from the store. Nothing here waits on a
conversation's actor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import ray

from cluster import placement
from cluster.naming import HUB_NAME, named_detached
from core.event_feed import EventFeed
from core.event_hub import Batch, EventHub, HubDelivery, HubWatch
from core.event_order import lingers
from core.ids import new_id
from core.jsontypes import JsonObject
from core.store import Store

log = logging.getLogger("wonder.events")

LONG_POLL_S = 10.0
STORE_POLL_S = 5.0
IDLE_STOP_S = 60.0  # a listener following nothing for this long stops polling
RETRY_S = (0.1, 0.5, 1.0, 2.0)
RAY_ERRORS = (ray.exceptions.RayError, ray.exceptions.ActorUnavailableError)

_hubs: dict[str, Any] = {}


def hub_handle() -> Any:
    """The ``conversation-events`` actor (get-or-create; cached per process)."""
    if "hub" not in _hubs:
        _hubs["hub"] = named_detached(EventHub, HUB_NAME, **placement.singleton_options())
    return _hubs["hub"]


class RayEventPublisher:
    """``EventListeners``: hands frames to the hub; what one event-loop turn publishes goes in
    one call (a commit's events), and token deltas wait up to ``token_linger_s`` to go with
    what follows them (``lingers``)."""

    def __init__(self, hub: Callable[[], Any] = hub_handle, token_linger_s: float = 0.0) -> None:
        self._hub = hub
        self._linger_s = token_linger_s
        self._buffer: list[Batch] = []
        self._in_flight: set[Any] = set()
        self._soon = False  # a flush is due at the end of this event-loop turn
        self._lingering = False  # a flush is due when the buffered deltas' linger is over

    def publish(self, conversation_id: str, frames: Sequence[JsonObject]) -> None:
        self._buffer.append((conversation_id, list(frames)))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a thread without a loop (the gateway's store calls): send now
            self.flush()
            return
        if self._soon:
            return
        if self._linger_s > 0 and all(lingers(frame) for frame in frames):
            if not self._lingering:
                self._lingering = True
                loop.call_later(self._linger_s, self._linger_over)
            return
        self._soon = True
        loop.call_soon(self.flush)

    def _linger_over(self) -> None:
        if self._lingering:  # not flushed meanwhile with a durable event
            self.flush()

    def flush(self) -> None:
        self._soon = self._lingering = False
        batches, self._buffer = self._buffer, []
        if not batches:
            return
        try:
            ref = self._hub().publish.remote(batches)
        except RAY_ERRORS as exc:
            log.info("events of %d conversations not published (%s)", len(batches), exc)
            return
        self._in_flight.add(ref)
        ref.future().add_done_callback(lambda done: self._landed(ref, done))

    def _landed(self, ref: Any, done: Any) -> None:
        self._in_flight.discard(ref)
        if not done.cancelled() and done.exception() is not None:
            log.info("a publish did not reach the hub (%s)", done.exception())


class RayEventListener:
    """``FeedSource`` over the hub, and the feed it fills, for one event loop of one process."""

    def __init__(self, store: Store, hub: Callable[[], Any] = hub_handle) -> None:
        self.id = new_id("listener")
        self.feed = EventFeed(store, self)
        self._hub = hub
        self._epoch: str | None = None
        self._stale = False
        self._task: asyncio.Task[None] | None = None

    async def watch(self, conversation_id: str) -> list[JsonObject]:
        try:
            answer: HubWatch = await self._hub().watch.remote(self.id, conversation_id)
        except RAY_ERRORS as exc:
            log.info("could not watch %s yet (%s); the store poll covers it", conversation_id, exc)
            self._stale = True
            self._ensure_running()
            return []
        if self._epoch is None:
            self._epoch = answer.epoch
        elif answer.epoch != self._epoch:
            self._stale = True  # a new hub: tell it every conversation again
        self._ensure_running()
        return answer.tokens

    def unwatch(self, conversation_id: str) -> None:
        try:
            self._hub().unwatch.remote(self.id, conversation_id)
        except RAY_ERRORS as exc:
            log.info("could not unwatch %s (%s)", conversation_id, exc)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        """Long-poll the hub while something is followed (and a while after)."""
        polled_store = time.monotonic()
        idle_since: float | None = None
        failures = 0
        while True:
            now = time.monotonic()
            if self.feed.watched():
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since > IDLE_STOP_S:
                return
            try:
                delivery: HubDelivery = await self._hub().next.remote(self.id, LONG_POLL_S)
                failures = 0
                await self._take(delivery)
            except RAY_ERRORS as exc:
                failures += 1
                self._stale = True
                log.info("the events hub did not answer (%s); retrying", exc)
                await asyncio.sleep(RETRY_S[min(failures, len(RETRY_S)) - 1])
            except Exception:  # a bug here must not stop every stream of this process
                log.exception("the events listener failed; resubscribing from the store")
                self._stale = True
                await asyncio.sleep(RETRY_S[-1])
            if time.monotonic() - polled_store >= STORE_POLL_S:
                polled_store = time.monotonic()
                await self.feed.poll_store()

    async def _take(self, delivery: HubDelivery) -> None:
        if not delivery.known or delivery.epoch != self._epoch or self._stale:
            self._epoch, self._stale = delivery.epoch, False
            await self.feed.rewatch()  # every subscription catches up from the store
        elif delivery.lost:
            self.feed.resync()
        for conversation_id, frames in delivery.frames:
            self.feed.deliver(conversation_id, frames)


_listeners: dict[tuple[str, int], tuple[asyncio.AbstractEventLoop, RayEventListener]] = {}


def event_listener(store: Store, key: str = "") -> RayEventListener:
    """This process's listener for the running event loop (one per loop: a feed's subscriptions
    live on the loop that created them)."""
    loop = asyncio.get_running_loop()
    for stale in [k for k, (old, _l) in _listeners.items() if old.is_closed()]:
        del _listeners[stale]
    entry = _listeners.get((key, id(loop)))
    if entry is None or entry[0] is not loop:
        entry = (loop, RayEventListener(store))
        _listeners[(key, id(loop))] = entry
    return entry[1]
