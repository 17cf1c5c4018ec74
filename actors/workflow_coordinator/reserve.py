"""A small reserve of coordinators created ahead of their runs.

Creating an actor means a worker process and its imports: 0.7-1.6 s on a quiet 2-core machine
(ARCHITECTURE.md §10), more than a whole fan-out of no-op tasks takes. The reserve keeps ``size``
coordinators alive, each already named ``workflow:<run_id>`` for a run id chosen in advance, so
starting a run is: take a run id, write the run row under it, call ``start``. Each take starts a
replacement in the background. A reserve only serves callers with its own settings (the reserved
actors opened that store).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from core.ids import new_id

log = logging.getLogger("wonder.workflows")


class CoordinatorReserve:
    """Plain Python; ``cluster.workflows`` applies ``ray.remote`` with a name and lifetime.

    ``create(run_id)`` starts the coordinator named for ``run_id`` and returns once it is up.
    """

    def __init__(
        self, size: int, settings_env: dict[str, str], create: Callable[[str], Awaitable[object]]
    ) -> None:
        self.size = size
        self.settings_env = dict(settings_env)
        self._create = create
        self._ready: deque[str] = deque()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.taken = 0
        self.misses = 0

    async def take(self, settings_env: dict[str, str]) -> str | None:
        """A run id whose coordinator is up, or ``None`` (empty, or other settings)."""
        self._refill()
        if settings_env != self.settings_env or not self._ready:
            self.misses += 1
            return None
        self.taken += 1
        run_id = self._ready.popleft()
        self._refill()
        return run_id

    async def wake(self) -> dict[str, int]:
        """Start filling (a new reserve is empty); returns ``stats``."""
        self._refill()
        return await self.stats()

    async def stats(self) -> dict[str, int]:
        return {
            "size": self.size,
            "ready": len(self._ready),
            "starting": self._starting,
            "taken": self.taken,
            "misses": self.misses,
        }

    def _refill(self) -> None:
        while len(self._ready) + self._starting < self.size:
            self._starting += 1
            task = asyncio.get_running_loop().create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        run_id = new_id("run")
        try:
            await self._create(run_id)
            self._ready.append(run_id)
        except Exception:  # a reserve that cannot start coordinators just stays empty
            log.exception("could not start a reserve coordinator")
        finally:
            self._starting -= 1
