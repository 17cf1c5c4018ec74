"""A process-count limit per sandboxed command: a pids cgroup of its own, where one can be made.

The kernel counts every process and thread in a cgroup against its ``pids.max``, whoever's user
it runs as (``RLIMIT_NPROC`` does not hold for root, and otherwise counts all of a user's
processes on the host). Each command gets ``<root>/wonder-sandbox-<id>``; its launcher moves itself
in before it starts bubblewrap, so everything the command forks is counted, and the cgroup is
removed once the command's processes are gone.

``<root>``: ``WONDER_SHELL_CGROUP_DIR`` when the operator names one (a cgroup v2 directory
delegated to Wonder's user with the ``pids`` controller enabled for its children, or a v1 ``pids``
directory), else this process's own cgroup in a cgroup v1 ``pids`` hierarchy when it may create
children there. Without one, the sandbox falls back to ``RLIMIT_NPROC`` inside its own user
namespace (``actors.workspace.sandbox``), which the kernel ignores for root.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

V1_PIDS = Path("/sys/fs/cgroup/pids")
EMPTY_WAIT_S = 5.0


def _own_v1_pids_dir() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return V1_PIDS / path.lstrip("/")
    return None


def _usable(root: Path) -> bool:
    return (root / "cgroup.procs").exists() and os.access(root, os.W_OK | os.X_OK)


@functools.cache
def cgroup_root(configured: str | None) -> Path | None:
    """Where per-command pids cgroups go here, or None when none can be made."""
    if configured:
        root = Path(configured)
        return root if _usable(root) else None
    own = _own_v1_pids_dir()
    return own if own is not None and _usable(own) else None


class PidsCgroup:
    """One command's cgroup: its directory and whether the limit stopped a fork."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def limit_reached(self) -> bool:
        try:
            events = (self.path / "pids.events").read_text().split()
        except OSError:
            return False
        return len(events) >= 2 and events[0] == "max" and events[1] != "0"

    def _empty(self) -> bool:
        try:
            return (self.path / "cgroup.procs").read_text().strip() == ""
        except OSError:
            return True


@contextlib.asynccontextmanager
async def pids_cgroup(root: Path | None, max_processes: int) -> AsyncIterator[PidsCgroup | None]:
    """A new cgroup under ``root`` allowing ``max_processes`` (None when ``root`` is None or the
    cgroup cannot be made); removed after its processes are gone."""
    if root is None:
        yield None
        return
    path = root / f"wonder-sandbox-{uuid.uuid4().hex[:16]}"
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(max_processes))
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        yield None
        return
    group = PidsCgroup(path)
    try:
        yield group
    finally:
        deadline = time.monotonic() + EMPTY_WAIT_S
        while not group._empty() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # the kernel is still reaping the namespace the command left
        with contextlib.suppress(OSError):
            path.rmdir()
