"""The conversation directory: which conversation actors are resident, and eviction.

Every activation goes through this one named actor (``conversation-directory``), so it can hold
the number of resident conversation actors under ``max_resident_conversations``: before creating a
new one at the cap, it evicts the least recently used idle one (the actor agrees, then is killed —
everything it owns is already in the store). An actor idle for the TTL asks to be released the same
way. This is the Durable Object hibernation analogue: resident actors are bounded by activity,
not by the number of conversations.

Activations are bounded too: at most ``max_starting`` actors are starting (created, not yet ready)
at once — a burst of new conversations queues here, first come first served, instead of piling
process starts onto the node — and at most ``max_waiting`` activations wait for a start slot; past
that an activation is refused at once with a retriable ``Unavailable`` (a 503 with
``Retry-After``), never an unbounded wait. Messages to a conversation whose activation waits are
still acknowledged at once (``intake``).

A reserve of ``reserve_size`` actors started ahead of time for conversations not yet created
(ids handed out by ``take_reserved``, as the workflow coordinators' reserve does): a new
conversation created with such an id answers its first message without waiting for a process.
The reserve refills in the background, one start at a time, and only while no activation waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from core.errors import Unavailable
from core.ids import new_id
from core.ports import ActorHost

log = logging.getLogger("wonder.directory")

EVICTION_WAIT_S = 30.0
READY_WAIT_S = 120.0  # an actor not ready by then gives its start slot back anyway


class ConversationDirectory:
    """Plain Python; ``cluster`` applies ``ray.remote`` with its name and lifetime, and hands it
    the ``ActorHost`` that creates, evicts and stops conversation actors."""

    def __init__(
        self,
        max_resident: int,
        host: ActorHost,
        max_starting: int = 8,
        max_waiting: int = 512,
        reserve_size: int = 0,
    ) -> None:
        self.max_resident = max_resident
        self.max_starting = max_starting
        self.max_waiting = max_waiting
        self._host = host
        self._resident: OrderedDict[str, Any] = OrderedDict()
        self._lock = asyncio.Lock()
        self._start_slots = asyncio.Semaphore(max_starting)  # FIFO: fair to waiters
        self._starting: set[str] = set()
        self._waiting = 0
        self._side: set[asyncio.Task[None]] = set()
        self.peak_resident = 0
        self.evictions = 0
        self.activations = 0
        self.refused = 0
        self.reserve_size = reserve_size
        self._reserve: OrderedDict[str, Any] = OrderedDict()  # id → handle of a ready actor
        self._refilling = False
        self.reserved_taken = 0

    async def activate(self, conversation_id: str, replace: bool = False) -> Any:
        """A live handle for ``conversation_id``, creating the actor (and evicting) if needed.

        The handle of a new actor comes back as soon as it is created: calls on it run once the
        actor is ready."""
        handle = self._resident.get(conversation_id)
        if handle is not None and not replace:
            self._resident.move_to_end(conversation_id)
            return handle
        if replace:
            return await self._replace(conversation_id)
        if self._waiting >= self.max_waiting:
            self.refused += 1
            raise Unavailable(
                f"{self._waiting} conversations are waiting to start on this cluster; "
                "retry in a few seconds"
            )
        self._waiting += 1
        try:
            await self._start_slots.acquire()
        finally:
            self._waiting -= 1
        try:
            async with self._lock:
                handle = self._resident.get(conversation_id)
                if handle is not None:
                    self._resident.move_to_end(conversation_id)
                    self._start_slots.release()
                    return handle
                handle = await self._make_resident(conversation_id)
        except BaseException:
            self._start_slots.release()
            raise
        self._starting.add(conversation_id)
        task = asyncio.get_running_loop().create_task(self._started(conversation_id, handle))
        self._side.add(task)
        task.add_done_callback(self._side.discard)
        return handle

    async def _replace(self, conversation_id: str) -> Any:
        """The handle again after a call on it failed: the host gets the actor Ray is restarting
        (its process crashed, its node was lost) or creates one if it is gone (evicted).

        No start slot is taken or waited for: slots bound the starts this directory causes, and
        Ray restarts a lost node's actors all at once anyway; queueing each caller behind the
        others' restarts only delayed them (tests/cluster/test_node_loss.py)."""
        async with self._lock:
            return await self._make_resident(conversation_id)

    async def _make_resident(self, conversation_id: str) -> Any:
        """Under the lock: room made (evicting), the host's actor for ``conversation_id`` made
        resident and counted as an activation."""
        self._resident.pop(conversation_id, None)
        await self._make_room(conversation_id)
        handle = self._host.create(conversation_id, self._held())
        self._resident[conversation_id] = handle
        self.peak_resident = max(self.peak_resident, len(self._resident))
        self.activations += 1
        return handle

    def _held(self) -> set[str]:
        """The conversations whose actors this directory holds: resident or in the reserve."""
        return {*self._resident, *self._reserve}

    def is_ready(self, conversation_id: str) -> bool:
        """Whether the conversation's actor is resident and started (asks nothing, starts
        nothing): a message to it is answered by the actor in milliseconds."""
        return conversation_id in self._resident and conversation_id not in self._starting

    async def _started(self, conversation_id: str, handle: Any) -> None:
        """Hold the start slot until the actor is ready (or failed, or took too long)."""
        try:
            await asyncio.wait_for(self._host.ready(handle), READY_WAIT_S)
        except Exception:  # a failed start is the caller's to see; the slot goes back either way
            log.warning("conversation %s did not start cleanly", conversation_id, exc_info=True)
        finally:
            self._starting.discard(conversation_id)
            self._start_slots.release()

    # ------------------------------------------------------------------ the reserve

    async def take_reserved(self) -> str | None:
        """The id of a conversation actor already running, for a conversation about to be created
        with that id; ``None`` when the reserve is empty (the caller picks its own id)."""
        self.refill()
        if not self._reserve or len(self._resident) >= self.max_resident:
            return None  # at the cap a new conversation activates as usual, when first called
        conversation_id, handle = self._reserve.popitem(last=False)
        self._resident[conversation_id] = handle
        self.peak_resident = max(self.peak_resident, len(self._resident))
        self.reserved_taken += 1
        self.refill()
        return conversation_id

    def refill(self) -> None:
        """Start filling the reserve up in the background (one refill at a time)."""
        if self._refilling or len(self._reserve) >= self.reserve_size:
            return
        self._refilling = True
        task = asyncio.get_running_loop().create_task(self._refill())
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _refill(self) -> None:
        try:
            while len(self._reserve) < self.reserve_size and self._waiting == 0:
                conversation_id = new_id("conv")
                handle = self._host.create(conversation_id, self._held())
                try:
                    await asyncio.wait_for(self._host.ready(handle), READY_WAIT_S)
                except Exception:
                    log.warning("a reserved conversation actor did not start", exc_info=True)
                    self._host.kill(handle)
                    return
                self._reserve[conversation_id] = handle
        finally:
            self._refilling = False

    # ------------------------------------------------------------------ residency

    async def _make_room(self, incoming: str) -> None:
        deadline = time.monotonic() + EVICTION_WAIT_S
        while len(self._resident) >= self.max_resident:
            if await self._evict_one():
                continue
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"all {self.max_resident} resident conversations are busy; retry later"
                )
            await asyncio.sleep(0.05)

    async def _evict_one(self) -> bool:
        for conversation_id in list(self._resident):
            if await self._evict(conversation_id):
                return True
        return False

    async def _evict(self, conversation_id: str) -> bool:
        handle = self._resident.get(conversation_id)
        if handle is None:
            return False
        if not await self._host.try_hibernate(handle):
            return False
        self._resident.pop(conversation_id, None)
        self._host.kill(handle)
        self.evictions += 1
        log.info("evicted conversation %s", conversation_id)
        return True

    async def evict(self, conversation_id: str) -> bool:
        """Evict one conversation now if it is idle (operators, benchmarks)."""
        async with self._lock:
            return await self._evict(conversation_id)

    async def drop(self, conversation_id: str) -> bool:
        """Stop and remove a conversation's actor whatever it is doing (the conversation is being
        deleted); returns whether one was resident."""
        async with self._lock:
            handle = self._resident.pop(conversation_id, None)
            if handle is None:
                return False
            await self._host.shut_down(handle, "conversation deleted")
            self._host.kill(handle)
            return True

    async def release_idle(self, conversation_id: str) -> bool:
        """Called by an actor idle for its TTL: evict it if it is still idle."""
        async with self._lock:
            return await self._evict(conversation_id)

    async def forget(self, conversation_id: str) -> None:
        """Drop a handle known to be dead (the next activation creates a new actor)."""
        self._resident.pop(conversation_id, None)

    def configure(self, max_resident: int | None = None) -> dict[str, Any]:
        """Change the cap at run time (an operator knob; also used by tests and benchmarks)."""
        if max_resident is not None:
            if max_resident < 1:
                raise ValueError("max_resident must be at least 1")
            self.max_resident = max_resident
        return self.stats()

    def stats(self) -> dict[str, Any]:
        return {
            "resident": len(self._resident),
            "peak_resident": self.peak_resident,
            "evictions": self.evictions,
            "max_resident": self.max_resident,
            "starting": len(self._starting),
            "waiting": self._waiting,
            "activations": self.activations,
            "refused": self.refused,
            "max_starting": self.max_starting,
            "reserved": len(self._reserve),
            "reserved_taken": self.reserved_taken,
            "max_waiting": self.max_waiting,
            "conversations": list(self._resident),
        }
