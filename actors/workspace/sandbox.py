"""``shell.exec``'s sandbox: one bubblewrap (``bwrap``) sandbox per command, under ``prlimit``.

What holds (each is tested in ``tests/integration/test_workspaces.py`` or ``tests/security/``):

- **Filesystem**: the host's root is mounted read-only; the command's worktree is the one
  writable place (plus a private ``/tmp`` of ``tmp_mb``). Wonder's data dir (the store, memories,
  every other workspace) and ``SandboxPolicy.hidden_paths`` (``/root``, ``/home``, ``/run``...)
  are replaced by empty read-only tmpfs mounts, so another conversation's worktree cannot be read.
  The project's git directory is visible read-only, the worktree's own git directory (index, HEAD,
  its pointer to the repository) included: git in the sandbox reads (``status``, ``diff``,
  ``log``), commits go through ``repo.commit``, and git on the host never reads anything a
  command wrote there.
- **Privileges**: a new user namespace; every capability dropped (``--cap-drop ALL``), so the
  command cannot remount, mount or bypass file permissions, even though it runs as uid 0.
- **Processes**: a new PID namespace (it sees only its own processes) and session; the whole
  process group is killed with SIGKILL at the timeout, and when the sandbox's init dies the
  kernel kills everything left in its namespace (a ``setsid`` child included). At most
  ``max_processes`` processes and threads (a pids cgroup of its own, ``actors.workspace.cgroups``;
  else ``RLIMIT_NPROC`` in the sandbox's user namespace, which binds users other than root).
- **Network**: always a new network namespace with only loopback. When the policy allows hosts,
  the one way out is the egress proxy (``actors.workspace.egress``), bridged in as
  ``127.0.0.1:3128`` by ``socat`` and named by ``HTTP_PROXY``/``HTTPS_PROXY``.
- **Limits**: RLIMIT_CPU, RLIMIT_AS (memory) and RLIMIT_FSIZE per process; the worktree's disk
  quota (``actors.workspace.disk``); stdout and stderr are each capped at ``output_bytes`` (the
  rest is read and dropped; ``truncated`` says so).
- **Environment**: cleared; only ``PATH``, ``HOME`` (= the private ``/tmp``), ``LANG``, ``TERM``
  (and the proxy variables when the command has egress).

What does not hold: the rest of the host filesystem is *readable* (system files, and any path not
hidden); CPU time is limited per process, not per command; the kernel is shared (this is a
namespace sandbox, not a VM).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.workspace.cgroups import PidsCgroup, cgroup_root, pids_cgroup
from actors.workspace.disk import disk_use, watch_quota
from actors.workspace.egress import SOCKET_NAME, egress_socket
from core.errors import Unavailable
from core.workspaces import ExecResult, SandboxPolicy

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_CHUNK = 65_536
PRIVATE_TMP = Path("/tmp")
KILL_WAIT_S = 5.0
MIB = 1024 * 1024

EGRESS_DIR = PRIVATE_TMP / ".wonder-egress"
PROXY_URL = "http://127.0.0.1:3128"
# Inside the sandbox: socat turns the proxy's unix socket into 127.0.0.1:3128 of the sandbox's own
# loopback; the command starts once it listens (0C38 is 3128, 0A is LISTEN in /proc/net/tcp),
# looked for with shell builtins (one process per try: the sleep that leaves the CPU to socat).
EGRESS_BRIDGE = (
    f"socat TCP-LISTEN:3128,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:{EGRESS_DIR}/{SOCKET_NAME} "
    ">/dev/null 2>&1 & "
    "ready() { while read -r _ local _ state _; do "
    '[ "$local" = 0100007F:0C38 ] && [ "$state" = 0A ] && return 0; '
    "done < /proc/net/tcp; return 1; }; "
    'i=0; until ready; do i=$((i + 1)); [ "$i" -gt 500 ] && break; sleep 0.01; done; '
    'exec /bin/sh -c "$1"'
)
JOIN_CGROUP = 'echo $$ > "$0/cgroup.procs" && exec "$@"'


@dataclass(frozen=True, slots=True)
class SandboxLayout:
    """What the sandbox mounts: the worktree (writable), the repository's git directory
    (read-only, the worktree's own git directory inside it included), and directories to hide
    (empty tmpfs)."""

    worktree: Path
    repository_git_dir: Path
    hidden: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class Confinement:
    """What one run adds to the policy: the egress proxy's directory, the pids cgroup, and the
    largest file the worktree's quota still leaves room for."""

    egress_dir: Path | None = None
    cgroup: PidsCgroup | None = None
    file_size_bytes: int | None = None


def _depth(path: Path) -> int:
    return len(path.parts)


def _limits(policy: SandboxPolicy, confinement: Confinement) -> list[str]:
    file_size = policy.file_size_mb * MIB
    if confinement.file_size_bytes is not None:
        file_size = min(file_size, confinement.file_size_bytes)
    return [
        "prlimit",
        f"--cpu={policy.cpu_s}",
        f"--as={policy.memory_mb * MIB}",
        f"--fsize={file_size}",
        "--core=0",
        "--",
    ]


def _mounts(layout: SandboxLayout, policy: SandboxPolicy, egress_dir: Path | None) -> list[str]:
    argv = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # Parents before children: a tmpfs over /tmp first, then one over a data dir inside it.
    hidden_dirs = sorted({p for p in layout.hidden if p.is_dir()} | {PRIVATE_TMP}, key=_depth)
    for hidden in hidden_dirs:
        if hidden == PRIVATE_TMP:
            argv += ["--size", str(policy.tmp_mb * MIB)]
        argv += ["--tmpfs", str(hidden)]
    # Read-only, the worktree's git directory (index, HEAD, its pointer to the repository)
    # included: git on the host reads these, so nothing in here may come from a command.
    argv += ["--ro-bind", str(layout.repository_git_dir), str(layout.repository_git_dir)]
    argv += ["--bind", str(layout.worktree), str(layout.worktree)]
    if egress_dir is not None:
        argv += ["--ro-bind", str(egress_dir), str(EGRESS_DIR)]
    for hidden in hidden_dirs:
        if hidden != PRIVATE_TMP:  # the one scratch place; the others are empty and read-only
            argv += ["--remount-ro", str(hidden)]
    return argv


def _environment(egress: bool) -> list[str]:
    variables = {"PATH": SAFE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb"}
    if egress:
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            variables[name] = PROXY_URL
        variables["no_proxy"] = variables["NO_PROXY"] = "localhost,127.0.0.1,::1"
    argv = ["--clearenv"]
    for name, value in variables.items():
        argv += ["--setenv", name, value]
    return argv


def bwrap_argv(
    layout: SandboxLayout,
    policy: SandboxPolicy,
    command: str,
    confinement: Confinement | None = None,
) -> list[str]:
    """The ``[cgroup] prlimit … bwrap … sh -c COMMAND`` argument vector for one command."""
    confinement = confinement or Confinement()
    argv = ["bwrap", *_mounts(layout, policy, confinement.egress_dir)]
    argv += [
        "--chdir",
        str(layout.worktree),
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        *_environment(confinement.egress_dir is not None),
    ]
    inner = ["/bin/sh", "-c", command]
    if confinement.egress_dir is not None:
        inner = ["/bin/sh", "-c", EGRESS_BRIDGE, "wonder-egress", command]
    if confinement.cgroup is None:
        inner = ["prlimit", f"--nproc={policy.max_processes}", "--", *inner]
    full = [*_limits(policy, confinement), *argv, *inner]
    if confinement.cgroup is not None:
        full = ["/bin/sh", "-c", JOIN_CGROUP, str(confinement.cgroup.path), *full]
    return full


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
    argv: list[str],
    cwd: Path,
    timeout_s: float,
    cap: int,
    watch: Awaitable[str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ExecResult:
    """Run ``argv`` in its own process group; at ``timeout_s``, or when ``watch`` returns (a
    reason to stop it), the whole group is killed."""
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
    watcher = asyncio.ensure_future(watch) if watch is not None else None
    stopped: str | None = None
    try:
        waiting: set[asyncio.Future[Any]] = {asyncio.ensure_future(asyncio.shield(readers))}
        if watcher is not None:
            waiting.add(watcher)
        done, _ = await asyncio.wait(waiting, timeout=timeout_s, return_when="FIRST_COMPLETED")
        timed_out = not done
        if watcher is not None and watcher in done:
            stopped = watcher.result()
        if not readers.done():
            _kill_group(process.pid)
            await asyncio.wait_for(readers, KILL_WAIT_S)
        (out, out_cut), (err, err_cut), _ = readers.result()
    finally:
        if watcher is not None:
            watcher.cancel()
        _kill_group(process.pid)  # anything the command left behind in its group
    return ExecResult(
        exit_code=None if timed_out or stopped else process.returncode,
        stdout=out.decode(errors="replace"),
        stderr=err.decode(errors="replace"),
        truncated=out_cut or err_cut,
        timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 4),
        notice=stopped,
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
    read in ``/proc``.

    A worktree already over its quota runs the command held back: no file may grow (deleting is
    how it gets under), and it is stopped if the tree grows past what it held at the start.
    """
    quota, used = policy.disk_mb * MIB, await asyncio.to_thread(disk_use, layout.worktree)
    room = max(0, quota - used.bytes)
    held_back = room == 0 or used.entries >= policy.max_files
    async with contextlib.AsyncExitStack() as stack:
        egress_dir = None
        if policy.egress is not None:
            if shutil.which("socat") is None:
                raise Unavailable("shell network needs socat on this node (Debian: socat)")
            egress_dir = await stack.enter_async_context(egress_socket(policy.egress))
        root = cgroup_root(policy.cgroup_dir)
        cgroup = await stack.enter_async_context(pids_cgroup(root, policy.max_processes))
        file_size = 0 if held_back else room
        confinement = Confinement(egress_dir=egress_dir, cgroup=cgroup, file_size_bytes=file_size)
        argv = bwrap_argv(layout, policy, command, confinement)
        watch = watch_quota(
            layout.worktree, max(quota, used.bytes), max(policy.max_files, used.entries)
        )
        result = await _run_with_env(argv, layout, policy, timeout_s, env, watch)
        hit = ["processes"] if cgroup is not None and cgroup.limit_reached() else []
    if held_back or result.notice is not None:
        hit.append("disk")
    if held_back and result.notice is None:
        notice = (
            f"the worktree is over its quota ({policy.disk_mb} MiB, {policy.max_files} files): "
            "files could be removed, none could grow"
        )
        result = result.model_copy(update={"notice": notice})
    return result.model_copy(update={"limits_hit": hit})


async def _run_with_env(
    argv: list[str],
    layout: SandboxLayout,
    policy: SandboxPolicy,
    timeout_s: float,
    env: Mapping[str, str] | None,
    watch: Awaitable[str],
) -> ExecResult:
    """``run_argv``, with ``env`` handed to bubblewrap through a pipe (``--args FD``)."""
    if not env:
        return await run_argv(argv, layout.worktree, timeout_s, policy.output_bytes, watch)
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
            argv, layout.worktree, timeout_s, policy.output_bytes, watch, pass_fds=(read_end,)
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
