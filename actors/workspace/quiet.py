"""Commands share a worktree; a git that reads the worktree's files has it quiet, to itself.

Git on the host reads the files of a worktree by path (``git add`` stats a file, then opens it), so
a command running meanwhile could swap a symlink in between and have git read, and commit, a file
of the host. No sandboxed command of a workspace runs while such a git does: commands take the
worktree ``shared`` (they run concurrently with each other), ``repo.diff``, ``repo.commit`` and
``repo.search`` take it ``quiet`` (they wait for running commands to end; new commands wait for
them). Only this workspace's commands can write its worktree (no other sandbox sees it), so a
quiet worktree does not change under git. ``repo.read``, ``repo.tree`` and ``repo.write`` need no
quiet: they open by descriptor (``actors.workspace.paths``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class WorktreeQuiet:
    """A shared/exclusive lock on one worktree; waiting gits go before new commands."""

    def __init__(self) -> None:
        self._commands = 0
        self._gits_waiting = 0
        self._git_running = False
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        """For a command: alongside other commands, never alongside a reading git."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._git_running and not self._gits_waiting)
            self._commands += 1
        try:
            yield
        finally:
            async with self._changed:
                self._commands -= 1
                self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """For a git that reads the worktree's files: no command runs until it is done."""
        async with self._changed:
            self._gits_waiting += 1
            try:
                await self._changed.wait_for(lambda: self._commands == 0 and not self._git_running)
            finally:
                self._gits_waiting -= 1
                self._changed.notify_all()  # commands held back for this git may go if it left
            self._git_running = True
        try:
            yield
        finally:
            async with self._changed:
                self._git_running = False
                self._changed.notify_all()
