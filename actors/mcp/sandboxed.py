"""A stdio MCP server's process: its command inside ``shell.exec``'s bubblewrap sandbox.

The argument vector comes from the sandbox's own builder (``actors.workspace.sandbox``), so a
stdio server is held to whatever the sandbox holds a command to: the host's root read-only, the
data dir and the operator's hidden paths empty, a new user, PID, IPC and network namespace (no
network at all: a stdio server talks only through its pipes), every capability dropped, a
cleared environment, the per-process limits (CPU time from ``WONDER_MCP_STDIO_CPU_S``: a server
lives longer than a command). Its one writable place is a scratch directory of its own, removed
when the connection closes.
"""

from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path

from actors.workspace.sandbox import SandboxLayout, bwrap_argv
from core.settings import Settings
from core.workspaces import SandboxPolicy

ALWAYS_HIDDEN = (Path("/tmp"),)


def sandbox_policy(settings: Settings, client_id: str) -> SandboxPolicy:
    """``shell.exec``'s limits, without network (no egress proxy), with a server's CPU time."""
    policy = SandboxPolicy.of(settings, None, client_id)
    return policy.model_copy(update={"egress": None, "cpu_s": settings.mcp_stdio_cpu_s})


def scratch_layout(scratch: Path, settings: Settings) -> SandboxLayout:
    """The sandbox's mounts with ``scratch`` as its one writable directory (every directory the
    layout names is the scratch directory: a stdio server has no repository)."""
    data_dir = settings.data_dir.resolve()
    hidden = (*ALWAYS_HIDDEN, data_dir, *map(Path, settings.shell_hidden_paths))
    directories = {f.name: scratch for f in fields(SandboxLayout) if f.name != "hidden"}
    return SandboxLayout(hidden=tuple(hidden), **directories)


def sandboxed_argv(
    command: list[str], scratch: Path, settings: Settings, client_id: str
) -> list[str]:
    """The argument vector that runs ``command`` (a program and its arguments, never a shell
    line: each argument is quoted) in the sandbox of ``client_id``'s commands."""
    layout = scratch_layout(scratch, settings)
    policy = sandbox_policy(settings, client_id)
    return bwrap_argv(layout, policy, "exec " + shlex.join(command))
