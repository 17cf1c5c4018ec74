"""``WorkspaceActor``: one branch's worktree, its sandboxed commands and ``repo.*``.

Plain Python (``cluster.workspaces`` makes it the named detached actor ``workspace:<owner id>``,
the owner being the conversation or workflow run whose branch it is). On start it checks the branch
out in its worktree (``<workspaces_dir>/<owner id>``; an existing one is reused, so an evicted
workspace comes back with its uncommitted work; a missing one, its node lost, is checked out
afresh from the branch). Git operations run one at a time in a thread (they share
the worktree's index); commands run concurrently, each in its own sandbox (``sandbox``), and a git
that reads the worktree's files waits for them to end (``quiet``). ``repo.read``/``write``/``tree``
open by descriptor, beneath the worktree (``paths``). When no call has arrived for ``idle_ttl_s`` it
leaves the cluster through its ``Lifecycle``; the worktree stays on disk.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from actors.workspace.paths import confined, list_tree, read_file, write_file
from actors.workspace.quiet import WorktreeQuiet
from actors.workspace.sandbox import SandboxLayout, run_sandboxed
from core.errors import NotFound
from core.git import GitRepository
from core.ports import Lifecycle
from core.workspaces import (
    ExecResult,
    RepoCommit,
    RepoDiff,
    RepoFile,
    RepoSearch,
    RepoTree,
    SandboxPolicy,
    SearchHit,
    WorkspaceSpec,
    WorkspaceStatus,
)
from core.worktree import Worktree

T = TypeVar("T")
ALWAYS_HIDDEN = (Path("/tmp"),)
MAX_DIFF_BYTES = 200_000


class WorkspaceActor:
    """The worktree of ``spec.branch`` and the operations on it."""

    def __init__(self, spec: WorkspaceSpec, idle_ttl_s: float, lifecycle: Lifecycle) -> None:
        self.spec = spec
        self.root = Path(spec.worktree)
        self._repository = GitRepository(Path(spec.repository))
        self._repository.add_worktree(self.root, spec.branch)
        # The repository says where this worktree's git directory is; the tree's own ``.git``
        # (which a command may rewrite) is never consulted.
        self._tree = Worktree.registered(self._repository, self.root)
        self._common_dir = self._repository.common_dir()
        self._idle_ttl_s = idle_ttl_s
        self._lifecycle = lifecycle
        self._git_lock = asyncio.Lock()
        self._quiet = WorktreeQuiet()
        self._in_flight = 0
        self._last_used = time.monotonic()
        self._watchdog: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ bookkeeping

    async def _use(self, work: Callable[[], Awaitable[T]]) -> T:
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_idle())
        self._in_flight += 1
        try:
            return await work()
        finally:
            self._in_flight -= 1
            self._last_used = time.monotonic()

    async def _git(self, fn: Callable[[], T]) -> T:
        """A git operation on the worktree: one at a time, off the event loop."""
        async with self._git_lock:
            return await asyncio.to_thread(fn)

    async def _quiet_git(self, fn: Callable[[], T]) -> T:
        """A git operation that reads the worktree's files: with no command running."""
        async with self._quiet.quiet():
            return await self._git(fn)

    async def _watch_idle(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_ttl_s / 4, 30.0))
            idle_for = time.monotonic() - self._last_used
            if self._in_flight == 0 and idle_for >= self._idle_ttl_s:
                self._lifecycle.exit()
                return

    def _layout(self, policy: SandboxPolicy) -> SandboxLayout:
        # The data dir, and every other worktree when the workspaces dir lies outside it.
        data_dir, workspaces = Path(self.spec.data_dir), self.root.parent
        others = (data_dir,) if data_dir in workspaces.parents else (data_dir, workspaces)
        hidden = (*ALWAYS_HIDDEN, *others, *map(Path, policy.hidden_paths))
        return SandboxLayout(
            worktree=self.root,
            repository_git_dir=self._common_dir,
            hidden=tuple(hidden),
        )

    # ------------------------------------------------------------------ shell

    async def exec(
        self,
        command: str,
        timeout_s: float,
        policy: SandboxPolicy,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` (``sh -c``) in a fresh sandbox in the worktree, with ``env`` added to
        its environment."""
        layout = self._layout(policy)

        async def run() -> ExecResult:
            async with self._quiet.shared():
                return await run_sandboxed(layout, policy, command, timeout_s, env)

        return await self._use(run)

    # ------------------------------------------------------------------ repo.*

    async def tree(self, path: str = "", max_entries: int = 500) -> RepoTree:
        return await self._use(lambda: asyncio.to_thread(self._list, path, max_entries))

    def _list(self, path: str, max_entries: int) -> RepoTree:
        entries, truncated = list_tree(self.root, path, max_entries)
        return RepoTree(path=path or ".", entries=entries, truncated=truncated)

    async def read(self, path: str, max_bytes: int = 200_000) -> RepoFile:
        return await self._use(lambda: asyncio.to_thread(self._read, path, max_bytes))

    def _read(self, path: str, max_bytes: int) -> RepoFile:
        data, size = read_file(self.root, path, max_bytes)
        text = data.decode(errors="replace")
        return RepoFile(path=path, content=text, size=size, truncated=size > max_bytes)

    async def write(self, path: str, content: str) -> RepoFile:
        return await self._use(lambda: self._git(lambda: self._write(path, content)))

    def _write(self, path: str, content: str) -> RepoFile:
        data = content.encode()
        write_file(self.root, path, data)
        return RepoFile(path=path, size=len(data))

    async def search(self, pattern: str, path: str = "", max_hits: int = 100) -> RepoSearch:
        return await self._use(
            lambda: self._quiet_git(lambda: self._search(pattern, path, max_hits))
        )

    def _search(self, pattern: str, path: str, max_hits: int) -> RepoSearch:
        where = str(confined(self.root, path))
        hits, more = self._tree.grep(pattern, where, max_hits)
        found = [SearchHit(path=p, line=n, text=t) for p, n, t in hits]
        return RepoSearch(pattern=pattern, hits=found, truncated=more)

    async def diff(self, base: str | None = None) -> RepoDiff:
        return await self._use(lambda: self._quiet_git(lambda: self._diff(base)))

    def _diff(self, base: str | None) -> RepoDiff:
        if base is not None and self._repository.resolve(base) is None:
            raise NotFound(f"no commit or branch {base!r}")
        text, truncated = self._tree.diff(base, MAX_DIFF_BYTES)
        names = self._tree.changed_names(base)
        return RepoDiff(base=base, diff=text, files=names, truncated=truncated)

    async def commit(self, message: str, author: str | None = None) -> RepoCommit:
        return await self._use(lambda: self._quiet_git(lambda: self._commit(message, author)))

    def _commit(self, message: str, author: str | None) -> RepoCommit:
        commit = self._tree.commit_all(message, author)
        files = self._tree.committed_files() if commit else []
        return RepoCommit(branch=self.spec.branch, commit=commit, files=files)

    async def remove(self) -> None:
        """Remove the worktree, files and registration (its owner was deleted). The branch stays:
        whether it goes is the caller's rule (``core.projects.retire_branch``)."""
        async with self._git_lock:
            await asyncio.to_thread(self._repository.remove_worktree, self.root)

    async def status(self) -> WorkspaceStatus:
        return await self._use(lambda: self._git(self._status))

    def _status(self) -> WorkspaceStatus:
        return WorkspaceStatus(
            workspace_id=self.spec.workspace_id,
            branch=self._tree.branch() or self.spec.branch,
            head=self._tree.head(),
            worktree=str(self.root),
            changed_files=self._tree.changed_files(),
        )
