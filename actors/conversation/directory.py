"""The conversation directory: which conversation actors are resident, and eviction.

Every activation goes through this one named actor (``conversation-directory``), so it can hold
the number of resident conversation actors under ``max_resident_conversations``: before creating a
new one at the cap, it evicts the least recently used idle one (the actor agrees, then is killed —
everything it owns is already in the store). An actor idle for the TTL asks to be released the same
way. This is the Durable Object hibernation analogue: resident actors are bounded by activity,
not by the number of conversations.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from core.errors import Unavailable
from core.ports import ActorHost

log = logging.getLogger("wonder.directory")

EVICTION_WAIT_S = 30.0


class ConversationDirectory:
    """Plain Python; ``cluster`` applies ``ray.remote`` with its name and lifetime, and hands it
    the ``ActorHost`` that creates, evicts and stops conversation actors."""

    def __init__(self, max_resident: int, host: ActorHost) -> None:
        self.max_resident = max_resident
        self._host = host
        self._resident: OrderedDict[str, Any] = OrderedDict()
        self._lock = asyncio.Lock()
        self.peak_resident = 0
        self.evictions = 0

    async def activate(self, conversation_id: str, replace: bool = False) -> Any:
        """A live handle for ``conversation_id``, creating the actor (and evicting) if needed."""
        handle = self._resident.get(conversation_id)
        if handle is not None and not replace:
            self._resident.move_to_end(conversation_id)
            return handle
        async with self._lock:
            handle = self._resident.get(conversation_id)
            if handle is not None and not replace:
                self._resident.move_to_end(conversation_id)
                return handle
            self._resident.pop(conversation_id, None)
            await self._make_room(conversation_id)
            handle = self._host.create(conversation_id)
            self._resident[conversation_id] = handle
            self.peak_resident = max(self.peak_resident, len(self._resident))
            return handle

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
            "conversations": list(self._resident),
        }
