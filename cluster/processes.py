"""Processes on this machine as ``/proc`` shows them: a started head's whole tree, and who holds
a port. Stopping what ``wonder up`` started means stopping exactly its processes — never
``ray stop``, which kills every Ray on the machine — and Ray's workers are children of the raylet
in process groups of their own, so a head's processes are its group plus their descendants.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
# /proc/net/tcp{,6} socket states: 0A is LISTEN.
TCP_LISTEN = "0A"


@dataclass(frozen=True, slots=True)
class ProcessView:
    pid: int
    ppid: int
    pgid: int
    name: str
    state: str

    @property
    def alive(self) -> bool:
        """Running or sleeping; a zombie (exited, not yet reaped) counts as gone."""
        return self.state not in ("Z", "X")


def read_process(pid: int) -> ProcessView | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    name, _, rest = stat.partition(" (")[2].rpartition(") ")
    fields = rest.split()
    if len(fields) < 3:
        return None
    return ProcessView(pid, int(fields[1]), int(fields[2]), name, fields[0])


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    view = read_process(pid)
    return view is not None and view.alive


def process_table() -> dict[int, ProcessView]:
    """Every live process: pid → its view."""
    table: dict[int, ProcessView] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            view = read_process(int(entry.name))
            if view is not None and view.alive:
                table[view.pid] = view
    return table


def group_and_descendants(pgid: int, table: dict[int, ProcessView]) -> set[int]:
    """The live members of process group ``pgid`` and, transitively, their children."""
    found = {pid for pid, view in table.items() if view.pgid == pgid}
    children: dict[int, list[int]] = {}
    for view in table.values():
        children.setdefault(view.ppid, []).append(view.pid)
    frontier = list(found)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rpartition(":")[2], 16)
            if local_port == port and fields[3] == TCP_LISTEN:
                inodes.add(fields[9])
    return inodes


def port_holders(port: int) -> dict[int, str]:
    """Processes with a TCP socket listening on ``port``: pid → command name (those this user
    may inspect)."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    holders: dict[int, str] = {}
    if not inodes:
        return holders
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        if _open_sockets(entry) & inodes:
            view = read_process(int(entry.name))
            holders[int(entry.name)] = view.name if view else "?"
    return holders


def _open_sockets(process_dir: Path) -> set[str]:
    links: set[str] = set()
    try:
        fds = list((process_dir / "fd").iterdir())
    except OSError:  # gone, or another user's
        return links
    for fd in fds:
        try:
            links.add(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return links
