"""Workspace actors on Ray: ``workspace:<conversation_id>``, and the ``Workspaces`` adapter.

Each conversation with a project branch gets a named detached ``WorkspaceActor`` (created on first
use with ``get_if_exists``; it exits by itself after ``workspace_idle_ttl_s`` without calls, its
worktree staying on disk, and the next call creates it again). Calls go through the one retry
helper (``ACTOR_CALL``): a call that meets an exiting or dead actor gets a fresh one. The actor
takes no CPU of its own: its commands are child processes limited by the sandbox.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import ray

from actors.workspace.actor import WorkspaceActor
from cluster.naming import as_wonder_error, existing_actor, named_detached, workspace_actor_name
from core.retry import ACTOR_CALL, with_retries
from core.workspaces import (
    ExecResult,
    RepoCommit,
    RepoDiff,
    RepoFile,
    RepoSearch,
    RepoTree,
    SandboxPolicy,
    WorkspaceSpec,
    WorkspaceStatus,
)

T = TypeVar("T")
RAY_CALL_ERRORS = (
    ray.exceptions.RayTaskError,
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
)


class ExitWhenIdle:
    """``Lifecycle`` of a workspace actor: leave the cluster (no restart)."""

    def exit(self) -> None:
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()


class RayWorkspaces:
    """``Workspaces`` over named detached ``WorkspaceActor``s (handles cached per process)."""

    def __init__(self, idle_ttl_s: float) -> None:
        self._idle_ttl_s = idle_ttl_s
        self._handles: dict[str, Any] = {}

    def _handle(self, spec: WorkspaceSpec) -> Any:
        handle = self._handles.get(spec.workspace_id)
        if handle is None:
            handle = named_detached(
                WorkspaceActor,
                workspace_actor_name(spec.workspace_id),
                spec,
                self._idle_ttl_s,
                ExitWhenIdle(),
                max_restarts=0,
                max_task_retries=0,
                max_concurrency=100,
            )
            self._handles[spec.workspace_id] = handle
        return handle

    async def _call(self, spec: WorkspaceSpec, call: Callable[[Any], Awaitable[T]]) -> T:
        async def attempt() -> T:
            try:
                return await call(self._handle(spec))
            except RAY_CALL_ERRORS as exc:
                error = as_wonder_error(exc, f"workspace {spec.workspace_id}")
                if error.retriable:
                    self._handles.pop(spec.workspace_id, None)
                raise error from None

        return await with_retries(ACTOR_CALL, attempt)

    async def exec(
        self, spec: WorkspaceSpec, command: str, timeout_s: float, policy: SandboxPolicy
    ) -> ExecResult:
        return await self._call(spec, lambda a: a.exec.remote(command, timeout_s, policy))

    async def tree(self, spec: WorkspaceSpec, path: str, max_entries: int) -> RepoTree:
        return await self._call(spec, lambda a: a.tree.remote(path, max_entries))

    async def read(self, spec: WorkspaceSpec, path: str, max_bytes: int) -> RepoFile:
        return await self._call(spec, lambda a: a.read.remote(path, max_bytes))

    async def write(self, spec: WorkspaceSpec, path: str, content: str) -> RepoFile:
        return await self._call(spec, lambda a: a.write.remote(path, content))

    async def search(
        self, spec: WorkspaceSpec, pattern: str, path: str, max_hits: int
    ) -> RepoSearch:
        return await self._call(spec, lambda a: a.search.remote(pattern, path, max_hits))

    async def diff(self, spec: WorkspaceSpec, base: str | None) -> RepoDiff:
        return await self._call(spec, lambda a: a.diff.remote(base))

    async def commit(self, spec: WorkspaceSpec, message: str, author: str | None) -> RepoCommit:
        return await self._call(spec, lambda a: a.commit.remote(message, author))

    async def status(self, spec: WorkspaceSpec) -> WorkspaceStatus:
        return await self._call(spec, lambda a: a.status.remote())

    def stop(self, workspace_id: str) -> bool:
        """Stop a workspace actor now (operators, tests); its worktree stays. True if one ran."""
        self._handles.pop(workspace_id, None)
        handle = existing_actor(workspace_actor_name(workspace_id))
        if handle is None:
            return False
        ray.kill(handle, no_restart=True)
        return True
