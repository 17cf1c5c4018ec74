"""``shell.exec`` and ``repo.*``: actions that run in the workspace of the task's branch.

The workspace is implicit (seed 001 "Tool Execution Context"): the task's conversation names it,
with its project and branch, else the task's workflow run (a run started with a project); the
acting agent must be scoped to that project. Paths are relative to the worktree; leaving it is a
``PERMISSION_DENIED`` tool error. Parameters come from the task's ``params`` first, then from the
tool input (``data``). ``repo.merge`` is the one action that changes the default branch, and only
as a workflow step (seed 001: merging is an explicit user action or a workflow configured to).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from actors.actions import ActionContext, JsonObject, action
from actors.actions.command_env import command_env_specs, resolve_command_env
from core.artifacts import ArtifactRepository
from core.domain import Persona
from core.errors import Conflict, InvalidInput, NonRetryableError, NotFound, PermissionDenied
from core.git import GitRepository
from core.ports import Workspaces
from core.projects import merge_into_default, workspace_for
from core.workspaces import SandboxPolicy, WorkspaceSpec

INDEX_FILES = 200
INDEX_COMMITS = 10
INDEX_ARTIFACTS = 50

MAX_WRITE_BYTES = 1_000_000
MAX_COMMAND_CHARS = 20_000
ACTION_MARGIN_S = 5.0


def _param(params: JsonObject, data: JsonObject, name: str, default: Any = None) -> Any:
    if name in params and params[name] is not None:
        return params[name]
    return data.get(name, default)


def _text(params: JsonObject, data: JsonObject, name: str, default: str | None = None) -> str:
    value = _param(params, data, name, default)
    if value is None:
        raise InvalidInput(f"missing {name}")
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    return value


def _bounded(params: JsonObject, data: JsonObject, name: str, default: int, top: int) -> int:
    value = _param(params, data, name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 1 <= value <= top:
        raise InvalidInput(f"{name} must be a number from 1 to {top}")
    return int(value)


async def _workspace(ctx: ActionContext) -> tuple[Workspaces, WorkspaceSpec]:
    workspaces = ctx.services.workspaces
    if workspaces is None:
        raise NonRetryableError("workspaces are not available in this process")
    spec = await asyncio.to_thread(
        workspace_for,
        ctx.services.store,
        ctx.services.settings,
        conversation_id=ctx.conversation_id,
        run_id=ctx.run_id,
        agent_id=ctx.agent_id,
    )
    return workspaces, spec


def _persona(ctx: ActionContext) -> Persona | None:
    store = ctx.services.store
    if not ctx.agent_id:
        return None
    try:
        agent = store.agents.get(ctx.agent_id)
    except NotFound:
        return None
    if agent.persona is not None:
        return agent.persona
    if agent.persona_ref is not None:
        ref = agent.persona_ref
        return store.personas.get(ref.id, ref.version, client_id=agent.client_id, owner=ref.owner)
    return None


@action("shell.exec")
async def shell_exec(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{command, timeout_s?}`` → ``{exit_code, stdout, stderr, truncated, timed_out, ...}``."""
    command = _text(params, data, "command")
    if not command.strip() or len(command) > MAX_COMMAND_CHARS:
        raise InvalidInput(f"command must be 1 to {MAX_COMMAND_CHARS} characters")
    settings = ctx.services.settings
    timeout = _param(params, data, "timeout_s", settings.shell_timeout_s)
    if not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise InvalidInput("timeout_s must be a number of seconds from 0 to 3600")
    # The command must end (killed if need be) before the executor's limit on the whole action.
    timeout = min(float(timeout), max(1.0, settings.action_timeout_s - ACTION_MARGIN_S))
    specs = command_env_specs(params)  # from the task definition only, never from the input
    workspaces, spec = await _workspace(ctx)
    persona = await asyncio.to_thread(_persona, ctx)
    policy = SandboxPolicy.of(settings, persona, spec.client_id)
    env = await resolve_command_env(specs, ctx)
    result = await workspaces.exec(spec, command, timeout, policy, env or None)
    return result.model_dump()


@action("repo.tree")
async def repo_tree(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{path?, max_entries?}`` → the files and directories under ``path``."""
    path = _text(params, data, "path", "")
    limit = _bounded(params, data, "max_entries", 500, 5000)
    workspaces, spec = await _workspace(ctx)
    return (await workspaces.tree(spec, path, limit)).model_dump()


@action("repo.read")
async def repo_read(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{path, max_bytes?}`` → ``{path, content, size, truncated}``."""
    path = _text(params, data, "path")
    limit = _bounded(params, data, "max_bytes", 200_000, 2_000_000)
    workspaces, spec = await _workspace(ctx)
    return (await workspaces.read(spec, path, limit)).model_dump()


@action("repo.write")
async def repo_write(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{path, content}`` → ``{path, size}`` (parents created; the file replaced)."""
    path = _text(params, data, "path")
    content = _text(params, data, "content")
    if len(content.encode()) > MAX_WRITE_BYTES:
        raise InvalidInput(f"content is over {MAX_WRITE_BYTES} bytes")
    workspaces, spec = await _workspace(ctx)
    return (await workspaces.write(spec, path, content)).model_dump()


@action("repo.search")
async def repo_search(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{pattern, path?, max_hits?}`` → ``git grep -E`` hits ``{path, line, text}``."""
    pattern = _text(params, data, "pattern")
    if not pattern or len(pattern) > 1000:
        raise InvalidInput("pattern must be 1 to 1000 characters")
    path = _text(params, data, "path", "")
    limit = _bounded(params, data, "max_hits", 100, 1000)
    workspaces, spec = await _workspace(ctx)
    return (await workspaces.search(spec, pattern, path, limit)).model_dump()


@action("repo.diff")
async def repo_diff(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{against?: "uncommitted" | "default_branch"}`` → the diff and the files it touches."""
    against = _text(params, data, "against", "uncommitted")
    if against not in ("uncommitted", "default_branch"):
        raise InvalidInput("against must be 'uncommitted' or 'default_branch'")
    workspaces, spec = await _workspace(ctx)
    base = spec.default_branch if against == "default_branch" else None
    return (await workspaces.diff(spec, base)).model_dump()


@action("repo.commit")
async def repo_commit(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{message}`` → commits every change on the conversation's branch."""
    message = _text(params, data, "message")
    if not message.strip() or len(message) > 10_000:
        raise InvalidInput("message must be 1 to 10000 characters")
    workspaces, spec = await _workspace(ctx)
    return (await workspaces.commit(spec, message, ctx.agent_id)).model_dump()


@action("repo.merge")
async def repo_merge(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """``{message?}`` → merges the branch into the project's default branch (a workflow step).

    A conflict is a ``CONFLICT`` error naming the files, and nothing changes: never forced.
    ``{status: "merged" | "up_to_date", commit, branch, default_branch, pushed, push_error}``.
    """
    if not ctx.run_id:
        raise PermissionDenied(
            "repo.merge runs only as a workflow step; a conversation's branch is merged by the "
            "explicit API call POST /v1/conversations/{id}/merge"
        )
    message = _param(params, data, "message")
    if message is not None and (not isinstance(message, str) or not 0 < len(message) <= 2000):
        raise InvalidInput("message must be a string of 1 to 2000 characters")
    _, spec = await _workspace(ctx)
    store = ctx.services.store
    project = await asyncio.to_thread(store.projects.get, spec.project_id)
    settings = ctx.services.settings
    report = await asyncio.to_thread(
        merge_into_default, store, project, settings, spec.branch, message
    )
    outcome = report.outcome
    if outcome.status == "conflicts":
        raise Conflict(
            f"merging {spec.branch} into {spec.default_branch} conflicts in "
            f"{', '.join(outcome.conflicts)}; nothing was changed"
        )
    return {
        "status": outcome.status,
        "commit": outcome.commit,
        "branch": spec.branch,
        "default_branch": spec.default_branch,
        "pushed": report.pushed,
        "push_error": report.push_error,
    }


def _artifact_titles(repository: str, limit: int) -> list[dict[str, str]]:
    artifacts = ArtifactRepository(Path(repository))
    titles = []
    for path in artifacts.paths()[:limit]:
        first = next(
            (line for line in artifacts.read(path).content.splitlines() if line.strip()), ""
        )
        titles.append({"path": path, "title": first.strip().lstrip("#").strip()[:200] or path})
    return titles


@action("repo.index")
async def repo_index(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """The conversation's code index (seed 001 "Indices"): pointers, not content — the file tree,
    the branch's recent commits, the project's artifact titles. ``{"available": false}`` when the
    conversation has no project branch (context assembly then simply has no index)."""
    try:
        workspaces, spec = await _workspace(ctx)
    except (InvalidInput, PermissionDenied) as exc:
        return {"available": False, "reason": exc.message}
    files = _bounded(params, data, "max_files", INDEX_FILES, 2000)
    tree = await workspaces.tree(spec, "", files)
    repo = GitRepository(Path(spec.repository))
    commits = await asyncio.to_thread(repo.log, spec.branch, INDEX_COMMITS)
    project = await asyncio.to_thread(ctx.services.store.projects.get, spec.project_id)
    titles = await asyncio.to_thread(
        _artifact_titles, project.artifacts_repository, INDEX_ARTIFACTS
    )
    return {
        "available": True,
        "project_id": spec.project_id,
        "branch": spec.branch,
        "default_branch": spec.default_branch,
        "files": tree.entries,
        "files_truncated": tree.truncated,
        "commits": [{"commit": c["commit"][:12], "subject": c["subject"]} for c in commits],
        "artifacts": titles,
    }
