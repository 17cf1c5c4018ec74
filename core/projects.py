"""Projects and conversation branches: the rules (``store.projects`` stores, ``core.git`` runs git).

A project names the git repository agents work on. Wonder keeps its own repositories under
``<data_dir>/projects/<project_id>/``: ``code.git`` when it creates one (no repository given) or
clones one (a URL given), and always ``artifacts.git``. A local path names a repository Wonder works
in place (never inside Wonder's data dir: that holds other clients' repositories and workspaces).

An agent is scoped to projects (``Agent.project_ids``) and touches only those: a conversation of an
agent scoped to exactly one project (or started with an explicit ``project_id`` among them) gets
the branch ``wonder/conv-<conversation_id>`` from the project's default branch, recorded on the
conversation (``project_id``, ``branch``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from core.domain import Agent, Project
from core.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from core.git import GitError, GitRepository, conversation_branch, looks_like_url
from core.ids import new_id, utc_now
from core.settings import Settings
from core.store import Store

CODE_REPOSITORY = "code.git"
ARTIFACTS_REPOSITORY = "artifacts.git"


def projects_root(settings: Settings) -> Path:
    return settings.data_dir.resolve() / "projects"


def workspaces_root(settings: Settings) -> Path:
    """Where conversation worktrees live (``<data_dir>/workspaces/<conversation_id>``)."""
    return settings.data_dir.resolve() / "workspaces"


def _local_repository(settings: Settings, location: str) -> GitRepository:
    path = Path(location)
    if not path.is_absolute():
        raise InvalidInput(f"repository: a local path must be absolute, got {location!r}")
    resolved = path.resolve()
    data_dir = settings.data_dir.resolve()
    if resolved == data_dir or data_dir in resolved.parents:
        raise PermissionDenied("repository: paths inside Wonder's data directory are not allowed")
    roots = [Path(root).resolve() for root in settings.project_path_roots]
    if roots and not any(resolved == r or r in resolved.parents for r in roots):
        raise PermissionDenied(f"repository: {location} is outside the allowed project roots")
    return GitRepository.open(resolved)


def _cloned(url: str, path: Path) -> GitRepository:
    try:
        return GitRepository.clone_bare(url, path)
    except GitError as exc:  # nothing there to clone (or not reachable from here)
        raise NotFound(f"repository: cannot clone {url}: {exc.message}") from None


def create_project(
    store: Store,
    settings: Settings,
    *,
    client_id: str,
    name: str,
    repository: str | None = None,
    default_branch: str | None = None,
) -> Project:
    """Create a project: a new bare repository, a bare clone of a URL, or a local repository.

    The default branch must exist (a new repository gets one empty initial commit on it).
    """
    project_id = new_id("proj")
    home = projects_root(settings) / project_id
    try:
        if repository is None:
            repo = GitRepository.init_bare(home / CODE_REPOSITORY, default_branch or "main")
        elif looks_like_url(repository):
            repo = _cloned(repository, home / CODE_REPOSITORY)
        else:
            repo = _local_repository(settings, repository)
        branch = default_branch or repo.head_branch() or "main"
        if not repo.has_branch(branch):
            raise NotFound(f"default_branch: {branch} does not exist in the repository")
        artifacts = GitRepository.init_bare(home / ARTIFACTS_REPOSITORY, "main")
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    managed = repository is None or looks_like_url(repository)
    project = Project(
        id=project_id,
        client_id=client_id,
        name=name,
        repository=str(repo.path),
        origin=repository if managed and repository else None,
        managed=managed,
        default_branch=branch,
        artifacts_repository=str(artifacts.path),
        created_at=utc_now(),
    )
    return store.projects.insert(project)


def update_project(
    store: Store, project: Project, *, name: str | None = None, default_branch: str | None = None
) -> Project:
    if default_branch is not None and not repository_of(project).has_branch(default_branch):
        raise NotFound(f"default_branch: {default_branch} does not exist in the repository")
    changes: dict[str, str] = {}
    if name is not None:
        changes["name"] = name
    if default_branch is not None:
        changes["default_branch"] = default_branch
    return store.projects.save(project.model_copy(update=changes))


def delete_project(store: Store, settings: Settings, project: Project) -> None:
    """Delete a project no agent is scoped to (its managed repositories go with it)."""
    users = [
        a.id for a in store.agents.list_for_client(project.client_id) if project.id in a.project_ids
    ]
    if users:
        raise Conflict(f"project {project.id} is used by agents {users}")
    store.projects.delete(project.id)
    shutil.rmtree(projects_root(settings) / project.id, ignore_errors=True)


def repository_of(project: Project) -> GitRepository:
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
