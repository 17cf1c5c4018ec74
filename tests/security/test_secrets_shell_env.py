"""A secret handed to a ``shell.exec`` command reaches it as an environment variable and nothing
else on the host can read it from an argument vector: real bubblewrap, the sandbox's own runner.

The value is passed to bubblewrap through a pipe (``--args FD``); ``/proc/<pid>/cmdline`` of every
process (readable by any local user) is searched for it while the command runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.actions.command_env import command_env_specs
from actors.workspace.sandbox import SandboxLayout, run_sandboxed
from core.client_secrets import SecretRef
from core.errors import InvalidInput
from core.workspaces import SandboxPolicy

VALUE = "shell-secret-6a0c-never-in-argv"


def _layout(tmp_path: Path) -> SandboxLayout:
    dirs = [tmp_path / name for name in ("worktree", "repo.git")]
    for folder in dirs:
        folder.mkdir()
    return SandboxLayout(worktree=dirs[0], repository_git_dir=dirs[1], hidden=())


def _argv_holding(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue  # the process ended
    return found


async def test_a_secret_reaches_the_command_as_a_variable_and_never_an_argument(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path)
    command = 'printf %s "$API_TOKEN" > seen; env | sort > env.txt; sleep 2'
    running = asyncio.create_task(
        run_sandboxed(layout, SandboxPolicy(), command, 30, {"API_TOKEN": VALUE})
    )
    seen_in_argv: list[str] = []
    while not running.done():
        seen_in_argv += await asyncio.to_thread(_argv_holding, VALUE)
        await asyncio.sleep(0.1)
    result = running.result()
    assert result.exit_code == 0, result
    assert (layout.worktree / "seen").read_text() == VALUE
    assert seen_in_argv == []
    names = [line.split("=")[0] for line in (layout.worktree / "env.txt").read_text().splitlines()]
    assert "API_TOKEN" in names and "WONDER_DATA_DIR" not in names  # nothing of the host's


def test_only_the_task_definition_names_variables_and_secrets() -> None:
    specs = command_env_specs({"env": {"GH_TOKEN": {"secret": "gh"}, "MODE": "ci"}})
    assert specs == {"GH_TOKEN": SecretRef(secret="gh"), "MODE": "ci"}
    for bad in ({"PATH": "/evil"}, {"1X": "v"}, {"X": {"env": "HOME"}}, {"X": 3}):
        with pytest.raises(InvalidInput):
            command_env_specs({"env": bad})
