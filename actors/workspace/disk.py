"""How much a worktree holds on disk, and a watch that stops a command at the worktree's quota.

The worktree is a directory of the host's filesystem bound into the sandbox, so no mount option
limits it. Each command starts with ``RLIMIT_FSIZE`` no larger than what is left of the quota (no
single file can pass it; a worktree already over its quota starts with 0: files can be removed or
truncated, none grows), and a watch measures the tree while the command runs and has it killed
as soon as the tree holds more than the quota. Between two measurements a fast writer may pass the
quota by what it writes in that time; the watch waits ten times as long as its last measurement
took (it spends at most a tenth of a core on a large tree), at least ``MIN_INTERVAL_S`` and at
most ``MAX_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class DiskUse:
    bytes: int
    entries: int


def disk_use(root: Path) -> DiskUse:
    """Bytes allocated to everything under ``root`` (hard links counted once), and entries."""
    seen: set[tuple[int, int]] = set()
    total = entries = 0
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    entries += 1
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
                    key = (info.st_dev, info.st_ino)
                    if key not in seen:
                        seen.add(key)
                        total += info.st_blocks * 512
        except OSError:
            continue
    return DiskUse(bytes=total, entries=entries)


async def watch_quota(root: Path, quota_bytes: int, max_entries: int) -> str:
    """Return (with why) once ``root`` holds more than ``quota_bytes`` or ``max_entries``."""
    while True:
        started = time.monotonic()
        used = await asyncio.to_thread(disk_use, root)
        if used.bytes > quota_bytes:
            return f"the worktree passed its disk quota of {quota_bytes // 2**20} MiB"
        if used.entries > max_entries:
            return f"the worktree passed its limit of {max_entries} files and directories"
        took = time.monotonic() - started
        await asyncio.sleep(min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, 10 * took)))
