"""``shell.exec`` overhead: a sandboxed ``true`` against a plain subprocess ``true``, same run.

No Ray: it measures what the sandbox adds to one command (``prlimit`` + ``bwrap`` with fresh
user/PID/IPC/UTS/network namespaces, tmpfs mounts and binds) in a ``WorkspaceActor`` over a real
bare repository and worktree in a temp dir. Both sides go through the same runner
(``actors.workspace.sandbox.run_argv``: own process group, capped pipes), so the difference is the
sandbox. Repetitions are interleaved (plain, sandboxed, plain, ...) so machine load hits both.
Add ``--network`` to measure a sandbox with egress: its proxy on the host and the ``socat`` bridge
started inside it before the command (no traffic is sent).

Figures: ``plain_ms`` and ``sandboxed_ms`` (median and p95), ``overhead_ms`` (median difference),
``ratio`` (median sandboxed / median plain). Prints ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from actors.workspace.actor import WorkspaceActor
from actors.workspace.sandbox import run_argv
from core.git import GitRepository
from core.shell_egress import EgressPolicy
from core.workspaces import SandboxPolicy, WorkspaceSpec


class NeverExits:
    def exit(self) -> None:  # the benchmark ends the process itself
        return None


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


async def measure(repetitions: int, network: bool) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="wonder-bench-shell-"))
    try:
        repo = GitRepository.init_bare(root / "projects" / "p" / "code.git", "main")
        repo.create_branch("wonder/conv-bench", "main")
        spec = WorkspaceSpec(
            workspace_id="bench",
            client_id="bench",
            project_id="p",
            repository=str(repo.path),
            branch="wonder/conv-bench",
            default_branch="main",
            worktree=str(root / "workspaces" / "bench"),
            data_dir=str(root),
        )
        workspace = WorkspaceActor(spec, idle_ttl_s=3600, lifecycle=NeverExits())
        egress = EgressPolicy(persona_hosts=["*"], operator_hosts=["example.invalid"])
        policy = SandboxPolicy(
            egress=egress if network else None, hidden_paths=["/root", "/home", "/run"]
        )
        plain: list[float] = []
        sandboxed: list[float] = []
        for _ in range(3):  # warm-up: page cache, first exec of each binary
            await run_argv(["/bin/sh", "-c", "true"], workspace.root, 10, 64_000)
            await workspace.exec("true", 10, policy)
        for _ in range(repetitions):
            started = time.perf_counter()
            done = await run_argv(["/bin/sh", "-c", "true"], workspace.root, 10, 64_000)
            plain.append((time.perf_counter() - started) * 1000)
            assert done.exit_code == 0
            started = time.perf_counter()
            boxed = await workspace.exec("true", 10, policy)
            sandboxed.append((time.perf_counter() - started) * 1000)
            assert boxed.exit_code == 0, boxed
        plain_median = statistics.median(plain)
        sandboxed_median = statistics.median(sandboxed)
        return {
            "benchmark": "shell_exec",
            "repetitions": repetitions,
            "network": network,
            "plain_ms": {"median": round(plain_median, 2), "p95": round(p95(plain), 2)},
            "sandboxed_ms": {
                "median": round(sandboxed_median, 2),
                "p95": round(p95(sandboxed), 2),
            },
            "overhead_ms": round(sandboxed_median - plain_median, 2),
            "ratio": round(sandboxed_median / plain_median, 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--network", action="store_true", help="with the egress proxy and bridge")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.repetitions, args.network))))


if __name__ == "__main__":
    main()
