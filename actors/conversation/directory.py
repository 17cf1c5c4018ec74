"""The conversation directory: which conversation actors are resident, activation and eviction.

Every activation goes through this one named actor (``conversation-directory``), so it can hold
the number of resident conversation actors under ``max_resident``. This is the Durable Object
hibernation analogue: resident actors are bounded by activity, not by the number of
conversations, nor by who listens (subscribers follow a conversation without its actor, see
``core.event_feed``).

Activations queue here, first come first served (at most ``max_waiting``; past that one is
refused at once with a retriable ``Unavailable``, a 503 with ``Retry-After``), and are admitted
one after the other: a start slot (at most ``max_starting`` actors start at once — a burst of new
conversations does not pile process starts onto the node), then room.

Liveness at the cap:

- room is made by evicting the least recently *active* resident actor that agrees (it is idle:
  no live turn, no work; an actor says so when its last turn ends, ``note_idle``, and is asked
  first) — listeners do not count;
- an activation never waits without bound: a caller waits at most ``activation_wait_s``, and when
  every resident actor is busy (none agreed) for ``room_grace_s``, it gets ``AtCapacity`` (a
  retriable ``Unavailable`` with ``retry_after_s``);
- an activation asked with ``keep`` (a message already acknowledged in the store) stays queued when
  its caller gets ``AtCapacity``, and is admitted as soon as room frees; the actor's start-up
  recovery then starts the acknowledged turn, so the message is answered.

A reserve of ``reserve_size`` actors started ahead of time for conversations not yet created
(ids handed out by ``take_reserved``, as the workflow coordinators' reserve does): a new
conversation created with such an id answers its first message without waiting for a process.
The reserve refills in the background, one start at a time, and only while no activation waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from core.errors import Unavailable
from core.ids import new_id
from core.ports import ActorHost

log = logging.getLogger("wonder.directory")

ACTIVATION_WAIT_S = 60.0  # the longest a caller waits for its activation
ROOM_GRACE_S = 2.0  # how long every resident actor may stay busy before callers are told
ROOM_CHECK_S = 1.0  # how often a blocked admission asks the residents again unprompted
START_S = 1.0  # about what one actor start takes (for ``Retry-After`` estimates)
READY_WAIT_S = 120.0  # an actor not ready by then gives its start slot back anyway


class AtCapacity(Unavailable):
    """Every resident conversation actor is busy: no room for another now."""


@dataclass(eq=False)
class _Pending:
    """One queued activation: the handle its callers wait for."""

    future: asyncio.Future[Any]
    keep: bool = False  # admit it even once every caller stopped waiting
    waiters: int = 0


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
        activation_wait_s: float = ACTIVATION_WAIT_S,
        room_grace_s: float = ROOM_GRACE_S,
    ) -> None:
        self.max_resident = max_resident
        self.max_starting = max_starting
        self.max_waiting = max_waiting
        self.activation_wait_s = activation_wait_s
        self.room_grace_s = room_grace_s
        self._host = host
        self._resident: OrderedDict[str, Any] = OrderedDict()  # least recently active first
        self._idle: set[str] = set()  # said they have nothing to do since their last activation
        self._queue: OrderedDict[str, _Pending] = OrderedDict()
        self._room = asyncio.Event()  # something may have made room
        self._blocked = asyncio.Event()  # the cap is full and no resident actor agreed to leave
        self._admission: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._start_slots = asyncio.Semaphore(max_starting)
        self._starting: set[str] = set()
        self._start_times: deque[float] = deque(maxlen=200)  # created → ready, seconds
        self._side: set[asyncio.Task[None]] = set()
        self.peak_resident = 0
        self.evictions = 0
        self.activations = 0
        self.refused = 0
        self.at_capacity = 0
        self.reserve_size = reserve_size
        self._reserve: OrderedDict[str, Any] = OrderedDict()  # id → handle of a ready actor
        self._refilling = False
        self.reserved_taken = 0

    @property
    def _waiting(self) -> int:
        """Queued activations beyond those a free start slot admits at once."""
        free = max(0, self.max_starting - len(self._starting))
        return max(0, len(self._queue) - free)

    async def activate(
        self, conversation_id: str, replace: bool = False, keep: bool = False
    ) -> Any:
        """A live handle for ``conversation_id``, creating the actor (and evicting) if needed.

        The handle of a new actor comes back as soon as it is created: calls on it run once the
        actor is ready. ``keep``: if this caller is told ``AtCapacity``, the activation stays
        queued and happens when room frees."""
        handle = self._resident.get(conversation_id)
        if handle is not None and not replace:
            self._touch(conversation_id)
            return handle
        if replace and handle is not None:
            return await self._replace(conversation_id)
        pending = self._enqueue(conversation_id)
        pending.keep = pending.keep or keep
        pending.waiters += 1
        try:
            return await self._admitted(pending)
        finally:
            pending.waiters -= 1
            if not pending.waiters and not pending.keep and not pending.future.done():
                self._withdraw(conversation_id, pending)

    def _touch(self, conversation_id: str) -> None:
        self._resident.move_to_end(conversation_id)
        self._idle.discard(conversation_id)

    def _enqueue(self, conversation_id: str) -> _Pending:
        pending = self._queue.get(conversation_id)
        if pending is not None:
            return pending
        if self._waiting >= self.max_waiting:
            self.refused += 1
            raise Unavailable(
                f"{self._waiting} conversations are waiting to start on this cluster; "
                "retry in a few seconds",
                retry_after_s=self._retry_after(),
            )
        pending = _Pending(asyncio.get_running_loop().create_future())
        self._queue[conversation_id] = pending
        if self._admission is None or self._admission.done():
            self._admission = asyncio.get_running_loop().create_task(self._admit())
        return pending

    def _withdraw(self, conversation_id: str, pending: _Pending) -> None:
        if self._queue.get(conversation_id) is pending:
            del self._queue[conversation_id]
        pending.future.cancel()

    async def _admitted(self, pending: _Pending) -> Any:
        """Wait for the activation's handle: at most ``activation_wait_s``, and at most
        ``room_grace_s`` once every resident actor is busy."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.activation_wait_s
        while not pending.future.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise Unavailable(
                    f"waited {self.activation_wait_s:.0f}s to start this conversation; retry later",
                    retry_after_s=self._retry_after(),
                )
            if not self._blocked.is_set():
                blocked = loop.create_task(self._blocked.wait())
                try:
                    await asyncio.wait(
                        {pending.future, blocked},
                        timeout=remaining,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    blocked.cancel()
                continue
            # Every resident actor is busy: give them the grace to finish a turn, then say so.
            await asyncio.wait({pending.future}, timeout=min(self.room_grace_s, remaining))
            if not pending.future.done() and self._blocked.is_set():
                self.at_capacity += 1
                raise AtCapacity(
                    f"all {self.max_resident} resident conversations are busy; "
                    + ("this one starts when one is free" if pending.keep else "retry later"),
                    retry_after_s=self._retry_after(),
                )
        return pending.future.result()

    def _retry_after(self) -> float:
        """About when trying again may find room: the queue's starts, at least a second."""
        return max(1.0, math.ceil(len(self._queue) * START_S / max(1, self.max_starting)))

    async def _admit(self) -> None:
        """Admit queued activations in order: a start slot, room, then the actor."""
        while self._queue:
            await self._start_slots.acquire()
            try:
                admitted = await self._admit_head()
            except BaseException:
                self._start_slots.release()
                raise
            if not admitted:
                self._start_slots.release()

    async def _admit_head(self) -> bool:
        """Under a start slot: the first queued activation made resident (True: the slot is
        held until its actor is ready), or nothing to do yet (room may come later)."""
        if not self._queue:
            return False
        conversation_id, pending = next(iter(self._queue.items()))
        async with self._lock:
            if not await self._make_room():
                self._blocked.set()
                self._room.clear()
                room = False
            else:
                self._blocked.clear()
                room = True
                del self._queue[conversation_id]
                try:
                    handle = self._resident.get(conversation_id) or await self._make_resident(
                        conversation_id
                    )
                except Exception as exc:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                    return False
        if not room:
            try:
                await asyncio.wait_for(self._room.wait(), ROOM_CHECK_S)
            except TimeoutError:
                pass
            return False
        self._starting.add(conversation_id)
        task = asyncio.get_running_loop().create_task(self._started(conversation_id, handle))
        self._side.add(task)
        task.add_done_callback(self._side.discard)
        if not pending.future.done():
            pending.future.set_result(handle)
        return True

    async def _replace(self, conversation_id: str) -> Any:
        """The handle again after a call on it failed: the host gets the actor Ray is restarting
        (its process crashed, its node was lost) or creates one if it is gone.

        No start slot is taken or waited for: slots bound the starts this directory causes, and
        Ray restarts a lost node's actors all at once anyway; queueing each caller behind the
        others' restarts only delayed them (tests/cluster/test_node_loss.py)."""
        async with self._lock:
            self._resident.pop(conversation_id, None)
            return await self._make_resident(conversation_id)

    async def _make_resident(self, conversation_id: str) -> Any:
        """Under the lock, with room: the host's actor for ``conversation_id`` made resident and
        counted as an activation."""
        handle = self._host.create(conversation_id, self._held())
        self._resident[conversation_id] = handle
        self._idle.discard(conversation_id)
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
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await asyncio.wait_for(self._host.ready(handle), READY_WAIT_S)
            self._start_times.append(loop.time() - began)
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

    async def _make_room(self) -> bool:
        """Under the lock: evict until there is room for one more; False when every resident
        actor refused (busy)."""
        while len(self._resident) >= self.max_resident:
            if not await self._evict_one():
                return False
        return True

    async def _evict_one(self) -> bool:
        """Evict the least recently active actor that agrees: those that said they are idle
        first, then the others (an actor may be idle without having said so), those still
        starting last (asking one waits for its start)."""
        started = [c for c in self._resident if c not in self._starting]
        told = [c for c in started if c in self._idle]
        others = [c for c in started if c not in self._idle]
        for conversation_id in [*told, *others, *self._starting]:
            if await self._evict(conversation_id):
                return True
        return False

    async def _evict(self, conversation_id: str) -> bool:
        handle = self._resident.get(conversation_id)
        if handle is None:
            return False
        if not await self._host.try_hibernate(handle):
            self._idle.discard(conversation_id)  # busy again: ask it last next time
            return False
        self._resident.pop(conversation_id, None)
        self._idle.discard(conversation_id)
        self._host.kill(handle)
        self.evictions += 1
        self._room.set()
        log.info("evicted conversation %s", conversation_id)
        return True

    def note_idle(self, conversation_id: str) -> None:
        """An actor says its last turn ended and nothing runs: it was active just now, and is
        the first asked to make room (a blocked admission tries at once)."""
        if conversation_id in self._resident:
            self._resident.move_to_end(conversation_id)
            self._idle.add(conversation_id)
            self._room.set()

    async def evict(self, conversation_id: str) -> bool:
        """Evict one conversation now if it is idle (operators, benchmarks)."""
        async with self._lock:
            return await self._evict(conversation_id)

    async def drop(self, conversation_id: str) -> bool:
        """Stop and remove a conversation's actor whatever it is doing (the conversation is being
        deleted); returns whether one was resident."""
        async with self._lock:
            handle = self._resident.pop(conversation_id, None)
            self._idle.discard(conversation_id)
            if handle is None:
                return False
            await self._host.shut_down(handle, "conversation deleted")
            self._host.kill(handle)
            self._room.set()
            return True

    async def release_idle(self, conversation_id: str) -> bool:
        """Called by an actor idle for its TTL: evict it if it is still idle."""
        async with self._lock:
            return await self._evict(conversation_id)

    async def forget(self, conversation_id: str) -> None:
        """Drop a handle known to be dead (the next activation creates a new actor)."""
        if self._resident.pop(conversation_id, None) is not None:
            self._idle.discard(conversation_id)
            self._room.set()

    def configure(self, max_resident: int | None = None) -> dict[str, Any]:
        """Change the cap at run time (an operator knob; also used by tests and benchmarks)."""
        if max_resident is not None:
            if max_resident < 1:
                raise ValueError("max_resident must be at least 1")
            self.max_resident = max_resident
            self._room.set()
        return self.stats()

    def _start_p50_ms(self) -> float | None:
        """The median time of the recent starts, created → ready (what a start slot is held)."""
        if not self._start_times:
            return None
        return round(statistics.median(self._start_times) * 1000, 1)

    def stats(self) -> dict[str, Any]:
        return {
            "resident": len(self._resident),
            "peak_resident": self.peak_resident,
            "evictions": self.evictions,
            "max_resident": self.max_resident,
            "starting": len(self._starting),
            "waiting": self._waiting,
            "blocked": self._blocked.is_set(),
            "idle": len(self._idle),
            "activations": self.activations,
            "refused": self.refused,
            "at_capacity": self.at_capacity,
            "start_ms_p50": self._start_p50_ms(),
            "max_starting": self.max_starting,
            "reserved": len(self._reserve),
            "reserved_taken": self.reserved_taken,
            "max_waiting": self.max_waiting,
            "conversations": list(self._resident),
        }
