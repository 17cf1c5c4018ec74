"""Workspace actors on Ray: ``workspace:<owner id>``, and the ``Workspaces`` adapter.

Each branch Wonder made gets a named detached ``WorkspaceActor`` (created on first use with
``get_if_exists``; it exits by itself after ``workspace_idle_ttl_s`` without calls, its worktree
staying on disk, and the next call creates it again). Calls go through the one retry helper
(``ACTOR_CALL``): a call that meets an exiting or dead actor gets a fresh one. The actor takes no
CPU of its own: its commands are child processes limited by the sandbox.

**Placement.** A worktree lives on the disk of the node whose actor made it; the store records
that node (``WorkspaceRecord``). An actor created again (after idling out) is pinned to that node
with a *hard* node affinity, so it finds its worktree, uncommitted work included; a soft one could
land elsewhere and check the branch out a second time. When that node is gone (and no live node
has its address), the actor is placed like a new one and checks the branch out afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.workspace.actor import WorkspaceActor
from cluster import placement
from cluster.naming import as_wonder_error, existing_actor, named_detached, workspace_actor_name
from core.git import GitRepository
from core.ids import utc_now
from core.retry import ACTOR_CALL, with_retries
from core.settings import Settings
from core.store import Store
from core.workspaces import (
    ExecResult,
    RepoCommit,
    RepoDiff,
    RepoFile,
    RepoSearch,
    RepoTree,
    SandboxPolicy,
    WorkspaceRecord,
    WorkspaceSpec,
    WorkspaceStatus,
)
from core.workspaces import placement as workspace_placement

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


class RayWorkspaceActor(WorkspaceActor):
    """The workspace actor as Ray runs it: it can say which node holds its worktree."""

    def where(self) -> tuple[str, str]:
        address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        return ray.get_runtime_context().get_node_id(), address


def alive_nodes() -> dict[str, str]:
    """The live nodes' ids and addresses."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return {n["NodeID"]: n["NodeManagerAddress"] for n in nodes if n.get("Alive")}


def actor_options(settings: Settings, node_id: str | None) -> dict[str, Any]:
    """Pinned (hard affinity) to ``node_id``, else placed like a new workspace."""
    if node_id is None:
        return placement.workspace_options(settings)
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


class RayWorkspaces:
    """``Workspaces`` over named detached ``WorkspaceActor``s (handles cached per process)."""

    def __init__(self, store: Store, settings: Settings, idle_ttl_s: float | None = None) -> None:
        self._store = store
        self._settings = settings
        self._idle_ttl_s = idle_ttl_s or settings.workspace_idle_ttl_s
        self._handles: dict[str, Any] = {}

    async def _handle(self, spec: WorkspaceSpec) -> Any:
        handle = self._handles.get(spec.workspace_id)
        if handle is not None:
            return handle
        record = await asyncio.to_thread(self._store.workspaces.get, spec.workspace_id)
        node = workspace_placement(record, await asyncio.to_thread(alive_nodes))
        handle = named_detached(
            RayWorkspaceActor,
            workspace_actor_name(spec.workspace_id),
            spec,
            self._idle_ttl_s,
            ExitWhenIdle(),
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=100,
            **actor_options(self._settings, node),
        )
        node_id, node_ip = await handle.where.remote()
        if record is None or (record.node_id, record.node_ip) != (node_id, node_ip):
            found = WorkspaceRecord(
                spec=spec, node_id=node_id, node_ip=node_ip, updated_at=utc_now()
            )
            await asyncio.to_thread(self._store.workspaces.put, found)
        self._handles[spec.workspace_id] = handle
        return handle

    async def _call(self, spec: WorkspaceSpec, call: Callable[[Any], Awaitable[T]]) -> T:
        async def attempt() -> T:
            try:
                return await call(await self._handle(spec))
            except RAY_CALL_ERRORS as exc:
                error = as_wonder_error(exc, f"workspace {spec.workspace_id}")
                if error.retriable:
                    self._handles.pop(spec.workspace_id, None)
                raise error from None

        return await with_retries(ACTOR_CALL, attempt)

    async def exec(
        self,
        spec: WorkspaceSpec,
        command: str,
        timeout_s: float,
        policy: SandboxPolicy,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        return await self._call(spec, lambda a: a.exec.remote(command, timeout_s, policy, env))

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

    async def remove(self, spec: WorkspaceSpec) -> None:
        """Remove the workspace: its worktree (by its actor, on the node that holds it), the actor,
        and its record. A workspace never made (no record) has nothing to remove; one whose node
        is gone is unregistered from here (on a shared disk its files go too)."""
        record = await asyncio.to_thread(self._store.workspaces.get, spec.workspace_id)
        if record is not None:
            if workspace_placement(record, await asyncio.to_thread(alive_nodes)) is not None:
                await self._call(spec, lambda a: a.remove.remote())
            else:
                repository = GitRepository(Path(spec.repository))
                await asyncio.to_thread(repository.remove_worktree, Path(spec.worktree))
        self.stop(spec.workspace_id)
        await asyncio.to_thread(self._store.workspaces.delete, spec.workspace_id)

    def stop(self, workspace_id: str) -> bool:
        """Stop a workspace actor now (operators, tests); its worktree stays. True if one ran."""
        self._handles.pop(workspace_id, None)
        handle = existing_actor(workspace_actor_name(workspace_id))
        if handle is None:
            return False
        ray.kill(handle, no_restart=True)
        return True
