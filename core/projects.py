"""Projects and working branches: the rules (``store.projects`` stores, ``core.git`` runs git).

A project names the git repository agents work on. Wonder keeps its own repositories under
``<data_dir>/projects/<project_id>/``: ``code.git`` when it creates one (no repository given) or
clones one (a URL given), and always ``artifacts.git``. A local path names a repository Wonder works
in place (never inside Wonder's data dir: that holds other clients' repositories and workspaces).
Which paths and URLs a client may name is the operator's policy (``core.project_sources``); a clone
is slow, so ``create_project`` only stores it ``cloning`` and ``core.project_clones`` clones.

An agent is scoped to projects (``Agent.project_ids``) and touches only those. Who works on which
branch (seed 001, "Shell Operations and Branch Context"):

- a conversation of an agent scoped to exactly one project (or started with an explicit
  ``project_id`` among them) gets ``wonder/conv-<conversation_id>`` from the default branch;
- a workflow run started with a ``project_id`` gets ``wonder/run-<run_id>``; a run started by a
  conversation works on that conversation's branch; a subworkflow on its parent run's;
- a delegated call (a conversation's agent tool, a workflow's agent node) continues on its
  caller's branch and creates none, when the called agent is scoped to that project; a child
  conversation whose parent has no branch (for that agent) follows the first rule.

``project_id`` and ``branch`` are recorded on the conversation (or the run's context). A branch has
one workspace, keyed by the branch's owner (``core.git.branch_owner``).
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from core.domain import Agent, Conversation, Project, ProjectCredentials
from core.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    WonderError,
)
from core.git import (
    GitRepository,
    MergeOutcome,
    branch_owner,
    conversation_branch,
    looks_like_url,
    run_branch,
    unsafe_config_keys,
)
from core.ids import new_id, utc_now
from core.ports import Workspaces
from core.project_credentials import check_credentials, origin_access
from core.project_sources import (
    RemoteSource,
    check_local,
    check_remote,
    parse_remote,
    sources_for,
)
from core.settings import Settings
from core.store import Store
from core.workspaces import WorkspaceSpec

CODE_REPOSITORY = "code.git"
CLONE_GRACE_S = 60.0
ARTIFACTS_REPOSITORY = "artifacts.git"


def projects_root(settings: Settings) -> Path:
    return settings.data_dir.resolve() / "projects"


def workspaces_root(settings: Settings) -> Path:
    """Where worktrees live (``<workspaces_dir>/<owner id>``; default ``<data_dir>/workspaces``)."""
    if settings.workspaces_dir is not None:
        return settings.workspaces_dir.resolve()
    return settings.data_dir.resolve() / "workspaces"


def wonders_directories(settings: Settings) -> list[Path]:
    """Where no project's repository may be: Wonder's data and workspaces directories."""
    return [settings.data_dir.resolve(), workspaces_root(settings)]


def _local_repository(settings: Settings, client_id: str, location: str) -> GitRepository:
    path = Path(location)
    if not path.is_absolute():
        raise InvalidInput(f"repository: a local path must be absolute, got {location!r}")
    sources = sources_for(settings, client_id)
    check_local(sources, location, path.resolve(), wonders_directories(settings))
    try:
        repo = GitRepository.open(path.resolve())
    except NotFound:
        raise NotFound(
            f"repository: {location} is not a git repository (a bare repository, or a checkout "
            "with a .git directory)"
        ) from None
    check_repository_config(repo, location)
    return repo


def check_repository_config(repo: GitRepository, location: str) -> None:
    """Refuse a repository whose own configuration names commands or redirects git (Wonder's
    git would not obey it, and the repository's owner would expect it to), or whose objects
    come from other repositories."""
    unsafe = unsafe_config_keys(repo.config_names())
    if unsafe:
        raise PermissionDenied(
            f"repository: {location} sets {', '.join(unsafe)} in its git configuration; Wonder "
            "runs no repository-defined commands or redirections: remove them to use it"
        )
    if repo.has_alternates():
        raise PermissionDenied(
            f"repository: {location} borrows objects from other repositories (alternates)"
        )


def remote_source(settings: Settings, client_id: str, location: str) -> RemoteSource:
    """A URL to clone from, once the operator's policy for the client allows it."""
    source = parse_remote(location)
    sources = sources_for(settings, client_id)
    check_remote(sources, source)
    if source.scheme == "file":
        path = Path(source.path)
        check_local(sources, source.path, path.resolve(), wonders_directories(settings))
    return source


def _check_clones(store: Store, settings: Settings, client_id: str) -> None:
    cloning = [p for p in store.projects.list_for_client(client_id) if p.status == "cloning"]
    if len(cloning) >= settings.project_clones_per_client:
        raise QuotaExceeded(
            f"{len(cloning)} projects of this client are still cloning: wait for one to finish",
            retry_after_s=30.0,
        )


def create_project(
    store: Store,
    settings: Settings,
    *,
    client_id: str,
    name: str,
    repository: str | None = None,
    default_branch: str | None = None,
    push_on_merge: bool = False,
    credentials: ProjectCredentials | None = None,
) -> Project:
    """Create a project: a new bare repository, a local repository, or a clone of a URL.

    The first two are ready at once. A URL is checked against the operator's policy, and the
    project is stored ``cloning``: the clone itself is ``core.project_clones.complete_clone``'s,
    which the caller runs off its request path. The default branch must exist (a new repository
    gets one empty initial commit on it). ``push_on_merge`` and ``credentials`` need an origin (a
    cloned project); credentials name a secret of the client, sent only where the operator allows.
    """
    has_origin = repository is not None and looks_like_url(repository)
    if push_on_merge and not has_origin:
        raise InvalidInput("push_on_merge: only a project cloned from a URL has an origin")
    if credentials is not None and not has_origin:
        raise InvalidInput("credentials: only a project cloned from a URL has an origin")
    project_id = new_id("proj")
    home = projects_root(settings) / project_id
    if repository is not None and looks_like_url(repository):
        source = remote_source(settings, client_id, repository)
        if credentials is not None:
            sources = sources_for(settings, client_id)
            check_credentials(store, client_id, sources, source, credentials)
        _check_clones(store, settings, client_id)
        return store.projects.insert(
            Project(
                id=project_id,
                client_id=client_id,
                name=name,
                repository=str(home / CODE_REPOSITORY),
                origin=repository,
                credentials=credentials,
                managed=True,
                default_branch=default_branch or "main",
                push_on_merge=push_on_merge,
                artifacts_repository=str(home / ARTIFACTS_REPOSITORY),
                created_at=utc_now(),
                status="cloning",
            )
        )
    try:
        if repository is None:
            repo = GitRepository.init_bare(home / CODE_REPOSITORY, default_branch or "main")
            # Worktrees on other nodes' disks look missing from here: git gc must never prune them.
            repo.git("config", "gc.worktreePruneExpire", "never")
        else:
            repo = _local_repository(settings, client_id, repository)
        branch = default_branch or repo.head_branch() or "main"
        if not repo.has_branch(branch):
            raise NotFound(f"default_branch: {branch} does not exist in the repository")
        artifacts = GitRepository.init_bare(home / ARTIFACTS_REPOSITORY, "main")
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    project = Project(
        id=project_id,
        client_id=client_id,
        name=name,
        repository=str(repo.path),
        managed=repository is None,
        default_branch=branch,
        push_on_merge=push_on_merge,
        artifacts_repository=str(artifacts.path),
        created_at=utc_now(),
    )
    return store.projects.insert(project)


def project_view(project: Project, now: datetime, clone_timeout_s: float) -> Project:
    """A project as its client sees it: a clone that should have ended long ago (its gateway
    replica stopped mid-clone) reads as failed."""
    overdue = project.created_at + timedelta(seconds=clone_timeout_s + CLONE_GRACE_S)
    if project.status == "cloning" and now > overdue:
        return project.model_copy(
            update={"status": "failed", "error": "the clone did not finish (it was interrupted)"}
        )
    return project


def update_project(
    store: Store,
    settings: Settings,
    project: Project,
    *,
    name: str | None = None,
    default_branch: str | None = None,
    push_on_merge: bool | None = None,
    credentials: ProjectCredentials | None = None,
    drop_credentials: bool = False,
) -> Project:
    """Change what is given; ``credentials`` replace the project's (checked like at creation),
    ``drop_credentials`` removes them."""
    if default_branch is not None and not repository_of(project).has_branch(default_branch):
        raise NotFound(f"default_branch: {default_branch} does not exist in the repository")
    if push_on_merge and project.origin is None:
        raise Conflict(f"push_on_merge: project {project.id} has no origin (not cloned from a URL)")
    changes: dict[str, str | bool | ProjectCredentials | None] = {}
    if credentials is not None:
        if project.origin is None:
            raise Conflict(
                f"credentials: project {project.id} has no origin (not cloned from a URL)"
            )
        source = remote_source(settings, project.client_id, project.origin)
        sources = sources_for(settings, project.client_id)
        check_credentials(store, project.client_id, sources, source, credentials)
        changes["credentials"] = credentials
    elif drop_credentials:
        changes["credentials"] = None
    if name is not None:
        changes["name"] = name
    if default_branch is not None:
        changes["default_branch"] = default_branch
    if push_on_merge is not None:
        changes["push_on_merge"] = push_on_merge
    return store.projects.save(project.model_copy(update=changes))


def check_deletable(store: Store, project: Project) -> None:
    """A project may go once no agent is scoped to it."""
    users = [
        a.id for a in store.agents.list_for_client(project.client_id) if project.id in a.project_ids
    ]
    if users:
        raise Conflict(f"project {project.id} is used by agents {users}")


def delete_project(store: Store, settings: Settings, project: Project) -> None:
    """Delete a project no agent is scoped to (its managed repositories go with it).

    Its workspaces are removed first by the caller (their worktrees may be on other nodes).
    """
    check_deletable(store, project)
    store.projects.delete(project.id)
    shutil.rmtree(projects_root(settings) / project.id, ignore_errors=True)


def repository_of(project: Project) -> GitRepository:
    """The project's repository; ``Conflict`` while it is still cloning, or when it failed."""
    if project.status != "ready":
        why = project.error or "its repository is still being cloned"
        raise Conflict(f"project {project.id} is {project.status}: {why}")
    return GitRepository(Path(project.repository))


def check_agent_projects(store: Store, client_id: str, project_ids: list[str]) -> None:
    """Agents may be scoped only to their own client's projects."""
    for project_id in project_ids:
        try:
            store.projects.get(project_id, client_id=client_id)
        except NotFound:
            raise NotFound(f"project_ids: project {project_id} not found") from None


def project_for_conversation(
    store: Store, agent: Agent, requested: str | None = None
) -> Project | None:
    """The project a new conversation of ``agent`` works on: the one asked for (it must be one of
    the agent's), else the agent's only project; None when the agent has none or several."""
    if requested is not None:
        if requested not in agent.project_ids:
            raise PermissionDenied(f"agent {agent.id} is not scoped to project {requested}")
        return store.projects.get(requested, client_id=agent.client_id)
    if len(agent.project_ids) == 1:
        return store.projects.get(agent.project_ids[0], client_id=agent.client_id)
    return None


def start_conversation_branch(project: Project, conversation_id: str) -> str:
    """Create ``wonder/conv-<conversation_id>`` from the project's default branch; its name."""
    branch = conversation_branch(conversation_id)
    repository_of(project).create_branch(branch, project.default_branch)
    return branch


def start_run_branch(store: Store, client_id: str, project_id: str, run_id: str) -> str:
    """Create ``wonder/run-<run_id>`` from the default branch of the client's ``project_id``."""
    try:
        project = store.projects.get(project_id, client_id=client_id)
    except NotFound:
        raise NotFound(f"project_id: project {project_id} not found") from None
    branch = run_branch(run_id)
    repository_of(project).create_branch(branch, project.default_branch)
    return branch


def delegated_workplace(
    agent: Agent, project_id: str | None, branch: str | None
) -> tuple[str | None, str | None]:
    """Where a delegated call of ``agent`` works: on its caller's branch when the agent is scoped
    to the caller's project (seed 001: "no new branch is created"); else nowhere."""
    if project_id is not None and branch is not None and project_id in agent.project_ids:
        return project_id, branch
    return None, None


def child_workplace(
    store: Store, parent: Conversation, agent: Agent, child_id: str
) -> tuple[str | None, str | None]:
    """The ``(project_id, branch)`` of a conversation's delegated child ``child_id``: its
    parent's branch (``delegated_workplace``), else, like any new conversation of ``agent``, a
    branch of its own when the agent has exactly one project."""
    inherited = delegated_workplace(agent, parent.project_id, parent.branch)
    if inherited[1] is not None:
        return inherited
    project = project_for_conversation(store, agent)
    if project is None:
        return None, None
    return project.id, start_conversation_branch(project, child_id)


def workspace_spec(
    settings: Settings, client_id: str, project: Project, branch: str
) -> WorkspaceSpec:
    """The workspace of ``branch``: keyed by its owner, its worktree under the workspaces dir."""
    owner = branch_owner(branch)
    return WorkspaceSpec(
        workspace_id=owner,
        client_id=client_id,
        project_id=project.id,
        repository=project.repository,
        branch=branch,
        default_branch=project.default_branch,
        worktree=str(workspaces_root(settings) / owner),
        data_dir=str(settings.data_dir.resolve()),
    )


def workspace_for(
    store: Store,
    settings: Settings,
    *,
    conversation_id: str | None,
    run_id: str | None = None,
    agent_id: str | None = None,
) -> WorkspaceSpec:
    """The workspace a task works in: its conversation's branch, else its workflow run's.

    The acting agent must be scoped to the project (agents touch only their projects, even as a
    participant of someone else's conversation).
    """
    if conversation_id is not None:
        conversation = store.conversations.get(conversation_id)
        project_id, branch = conversation.project_id, conversation.branch
        client_id, acting = conversation.client_id, agent_id or conversation.agent_id
        if project_id is None or branch is None:
            raise InvalidInput(
                f"conversation {conversation_id} has no project branch (its agent is not scoped "
                "to exactly one project, or it was started without a project_id)"
            )
    elif run_id is not None:
        run = store.workflow_runs.get(run_id)
        project_id, branch = run.context.project_id, run.context.branch
        client_id, acting = run.client_id or "", agent_id
        if project_id is None or branch is None:
            raise InvalidInput(f"workflow run {run_id} works on no project (start it with one)")
    else:
        raise InvalidInput("repo.* and shell.exec run in a conversation's or a run's workspace")
    if acting is not None and project_id not in store.agents.get(acting).project_ids:
        raise PermissionDenied(f"agent {acting} is not scoped to project {project_id}")
    project = store.projects.get(project_id, client_id=client_id)
    return workspace_spec(settings, client_id, project, branch)


@dataclass(frozen=True, slots=True)
class MergeReport:
    """An explicit merge into the default branch, and the push that followed it (if any)."""

    outcome: MergeOutcome
    pushed: bool = False
    push_error: str | None = None


def merge_into_default(
    store: Store, project: Project, settings: Settings, branch: str, message: str | None = None
) -> MergeReport:
    """Merge ``branch`` into the project's default branch (a conflict changes nothing); with
    ``push_on_merge``, push the default branch back to the origin after a merge. A failed push
    leaves the merge in place and says why."""
    outcome = repository_of(project).merge(branch, project.default_branch, message)
    if outcome.status != "merged" or not project.push_on_merge:
        return MergeReport(outcome)
    try:
        push_default_branch(store, project, settings)
    except WonderError as exc:
        return MergeReport(outcome, pushed=False, push_error=exc.message)
    return MergeReport(outcome, pushed=True)


def push_default_branch(store: Store, project: Project, settings: Settings) -> str:
    """Push the default branch of a project cloned from a URL back to it (with the project's
    credentials, their secret read now); the commit pushed.

    Raises:
        Conflict: the project has no origin, the origin has commits the project lacks (fetching
            is not built), or its credentials' secret is gone.
        Unavailable: the origin could not be reached or refused the credentials.
        PermissionDenied: the operator's policy no longer allows the origin or the credentials.
    """
    if project.origin is None:
        raise Conflict(f"project {project.id} has no origin: it was not cloned from a URL")
    source = remote_source(settings, project.client_id, project.origin)
    sources = sources_for(settings, project.client_id)
    origin = origin_access(store, settings, project, sources, source)
    try:
        return repository_of(project).push(project.default_branch, origin.access)
    except WonderError as exc:
        raise origin.scrubbed(exc) from None


def retire_branch(project: Project, branch: str) -> bool:
    """A deleted owner's branch goes when the default branch holds all of it; True if deleted.

    An unmerged branch is kept (its work is not lost: merge it, or delete it with git).
    """
    return repository_of(project).delete_branch_if_merged(branch, project.default_branch)


def project_for_call(
    store: Store, conversation_id: str | None, agent_id: str | None, requested: str | None
) -> Project:
    """The project a tool call works on: the one named (it must be one of the acting agent's),
    else the conversation's project, else the agent's only project."""
    agent = store.agents.get(agent_id) if agent_id else None
    if requested is None and conversation_id is not None:
        requested = store.conversations.get(conversation_id).project_id
    if requested is None and agent is not None and len(agent.project_ids) == 1:
        requested = agent.project_ids[0]
    if requested is None:
        raise InvalidInput("no project: name project_id, or work in a project's conversation")
    if agent is None or requested not in agent.project_ids:
        raise PermissionDenied(f"agent {agent_id} is not scoped to project {requested}")
    return store.projects.get(requested, client_id=agent.client_id)


async def remove_conversation_workspaces(
    store: Store, settings: Settings, workspaces: Workspaces, conversation_ids: list[str]
) -> list[str]:
    """Before conversations are deleted: remove the workspaces they own (worktree and actor) and
    retire their branches (``retire_branch``: gone if merged, else kept). A child working on its
    parent's branch owns nothing. Returns the branches kept."""
    kept: list[str] = []
    for conversation_id in conversation_ids:
        conversation = await asyncio.to_thread(store.conversations.get, conversation_id)
        branch, project_id = conversation.branch, conversation.project_id
        if branch is None or project_id is None or branch != conversation_branch(conversation_id):
            continue
        try:
            project = await asyncio.to_thread(store.projects.get, project_id)
        except NotFound:  # the project went first: its repositories (and branches) with it
            continue
        await workspaces.remove(workspace_spec(settings, conversation.client_id, project, branch))
        if not await asyncio.to_thread(retire_branch, project, branch):
            kept.append(branch)
    return kept


async def remove_project_workspaces(store: Store, workspaces: Workspaces, project: Project) -> None:
    """Before a project is deleted: remove every workspace made on it (on whichever node)."""
    for record in await asyncio.to_thread(store.workspaces.list_for_project, project.id):
        await workspaces.remove(record.spec)
