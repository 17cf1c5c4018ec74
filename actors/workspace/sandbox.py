"""``shell.exec``'s sandbox: one bubblewrap (``bwrap``) sandbox per command, under ``prlimit``.

What holds (each is tested in ``tests/integration/test_workspaces.py``):

- **Filesystem**: the host's root is mounted read-only; the command's worktree is the one
  writable place (plus a private, empty ``/tmp``). Wonder's data dir (the store, memories, every
  other workspace) and ``SandboxPolicy.hidden_paths`` (``/root``, ``/home``, ``/run``...) are
  replaced by empty read-only tmpfs mounts, so another conversation's worktree cannot be read. The
  project's git directory is visible read-only (``git status``/``diff``/``log`` work; commits go
  through ``repo.commit``), and the worktree's own git dir (index, HEAD) is writable.
- **Privileges**: a new user namespace; every capability dropped (``--cap-drop ALL``), so the
  command cannot remount, mount or bypass file permissions, even though it runs as uid 0.
- **Processes**: a new PID namespace (it sees only its own processes) and session; the whole
  process group is killed with SIGKILL at the timeout, and when the sandbox's init dies the
  kernel kills everything left in its namespace (a ``setsid`` child included).
- **Network**: a new network namespace with only loopback unless the policy allows network.
- **Limits**: RLIMIT_CPU, RLIMIT_AS (memory) and RLIMIT_FSIZE per process; stdout and stderr are
  each capped at ``output_bytes`` (the rest is read and dropped; ``truncated`` says so).
- **Environment**: cleared; only ``PATH``, ``HOME`` (= the private ``/tmp``), ``LANG``, ``TERM``.

What does not hold: the rest of the host filesystem is *readable* (system files, and any path not
hidden); there is no limit on the number of processes or on disk usage of the worktree (RLIMIT_FSIZE
is per file); CPU time is limited per process, not per command; allowing network shares the host's
network stack (no per-host filtering: ``shell_hosts`` only switches it on); the kernel is shared
(this is a namespace sandbox, not a VM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.workspaces import ExecResult, SandboxPolicy

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_CHUNK = 65_536
PRIVATE_TMP = Path("/tmp")
KILL_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class SandboxLayout:
    """What the sandbox mounts: the worktree (writable), its git dir (writable), the repository's
    git directory (read-only), and directories to hide (empty tmpfs)."""

    worktree: Path
    worktree_git_dir: Path
    repository_git_dir: Path
    hidden: tuple[Path, ...]


def _depth(path: Path) -> int:
    return len(path.parts)


def bwrap_argv(layout: SandboxLayout, policy: SandboxPolicy, command: str) -> list[str]:
    """The ``prlimit … bwrap … sh -c COMMAND`` argument vector for one command."""
    limits = [
        "prlimit",
        f"--cpu={policy.cpu_s}",
        f"--as={policy.memory_mb * 1024 * 1024}",
        f"--fsize={policy.file_size_mb * 1024 * 1024}",
        "--core=0",
        "--",
    ]
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # Parents before children: a tmpfs over /tmp first, then one over a data dir inside it.
    hidden_dirs = sorted({p for p in layout.hidden if p.is_dir()}, key=_depth)
    for hidden in hidden_dirs:
        argv += ["--tmpfs", str(hidden)]
    argv += ["--ro-bind", str(layout.repository_git_dir), str(layout.repository_git_dir)]
    argv += ["--bind", str(layout.worktree_git_dir), str(layout.worktree_git_dir)]
    argv += ["--bind", str(layout.worktree), str(layout.worktree)]
    for hidden in hidden_dirs:
        if hidden != PRIVATE_TMP:  # the one scratch place; the others are empty and read-only
            argv += ["--remount-ro", str(hidden)]
    argv += [
        "--chdir",
        str(layout.worktree),
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        SAFE_PATH,
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "TERM",
        "dumb",
    ]
    if not policy.network:
        argv.append("--unshare-net")
    return [*limits, *argv, "/bin/sh", "-c", command]


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, bool]:
    """Read ``stream`` to its end, keeping the first ``cap`` bytes (the rest is dropped)."""
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(READ_CHUNK):
        room = cap - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), truncated


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def run_argv(
    argv: list[str], cwd: Path, timeout_s: float, cap: int, pass_fds: tuple[int, ...] = ()
) -> ExecResult:
    """Run ``argv`` in its own process group; at ``timeout_s`` the whole group is killed."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        pass_fds=pass_fds,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    readers = asyncio.gather(
        _read_capped(process.stdout, cap), _read_capped(process.stderr, cap), process.wait()
    )
    timed_out = False
    try:
        (out, out_cut), (err, err_cut), _ = await asyncio.wait_for(
            asyncio.shield(readers), timeout_s
        )
    except TimeoutError:
        timed_out = True
        _kill_group(process.pid)
        (out, out_cut), (err, err_cut), _ = await asyncio.wait_for(readers, KILL_WAIT_S)
    finally:
        _kill_group(process.pid)  # anything the command left behind in its group
    return ExecResult(
        exit_code=None if timed_out else process.returncode,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        truncated=out_cut or err_cut,
        timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 4),
    )


async def run_sandboxed(
    layout: SandboxLayout,
    policy: SandboxPolicy,
    command: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> ExecResult:
    """Run ``command`` with ``sh -c`` in a fresh sandbox over ``layout`` (see the module doc).

    ``env`` (secrets among them) reaches the command as ``--setenv`` arguments that bubblewrap
    reads from a pipe (``--args FD``), never from its argument vector, which any local user can
    read in ``/proc``."""
    argv = bwrap_argv(layout, policy, command)
    if not env:
        return await run_argv(argv, layout.worktree, timeout_s, policy.output_bytes)
    read_end, write_end = os.pipe()
    try:
        payload = b"".join(
            b"--setenv\0" + name.encode() + b"\0" + value.encode() + b"\0"
            for name, value in env.items()
        )
        _fill_pipe(write_end, payload)
        at = argv.index("--clearenv") + 1  # bwrap applies options in order
        argv = [*argv[:at], "--args", str(read_end), *argv[at:]]
        return await run_argv(
            argv, layout.worktree, timeout_s, policy.output_bytes, pass_fds=(read_end,)
        )
    finally:
        os.close(read_end)


def _fill_pipe(fd: int, payload: bytes) -> None:
    """Write ``payload`` into the pipe ``fd`` and close it (bounded: a pipe holds 64 KiB)."""
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
