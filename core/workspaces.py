"""Workspaces: where a conversation's code work happens, and the typed answers of its operations.

A conversation with a project branch (``core.projects``) has a workspace: a worktree of its branch
under ``<data_dir>/workspaces/<conversation_id>``, kept by the ``workspace:<conversation_id>``
actor. ``WorkspaceSpec`` says which; ``workspace_for`` derives it from the store and enforces that
the acting agent is scoped to the conversation's project. The models below cross the
``Workspaces`` port (``core.ports``).
"""

from __future__ import annotations

from pydantic import Field

from core.domain import Conversation, Model, Persona
from core.errors import InvalidInput, PermissionDenied
from core.projects import workspaces_root
from core.settings import Settings
from core.store import Store


class WorkspaceSpec(Model):
    """Which workspace: the conversation (its key), its project's repository and its branch."""

    workspace_id: str
    client_id: str
    project_id: str
    repository: str
    branch: str
    default_branch: str
    worktree: str
    data_dir: str


class SandboxPolicy(Model):
    """Limits of one ``shell.exec`` command (from settings, and the persona for the network)."""

    network: bool = False
    cpu_s: int = Field(120, ge=1)
    memory_mb: int = Field(2048, ge=16)
    file_size_mb: int = Field(256, ge=1)
    output_bytes: int = Field(64_000, ge=1)
    hidden_paths: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, settings: Settings, persona: Persona | None) -> SandboxPolicy:
        return cls(
            network=bool(persona and persona.constraints.shell_hosts),
            cpu_s=settings.shell_cpu_s,
            memory_mb=settings.shell_memory_mb,
            file_size_mb=settings.shell_file_size_mb,
            output_bytes=settings.shell_output_bytes,
            hidden_paths=list(settings.shell_hidden_paths),
        )


class ExecResult(Model):
    """What a sandboxed command did. ``truncated``: output went past the cap and was cut."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float


class RepoTree(Model):
    path: str
    entries: list[str]
    truncated: bool = False


class RepoFile(Model):
    path: str
    content: str = ""
    size: int
    truncated: bool = False


class SearchHit(Model):
    path: str
    line: int
    text: str


class RepoSearch(Model):
    pattern: str
    hits: list[SearchHit]
    truncated: bool = False


class RepoDiff(Model):
    """Uncommitted changes (``base`` None), or the worktree against ``base``."""

    base: str | None
    diff: str
    files: list[str]
    truncated: bool = False


class RepoCommit(Model):
    """A commit on the workspace's branch; ``commit`` None when there was nothing to commit."""

    branch: str
    commit: str | None
    files: list[str] = Field(default_factory=list)


class WorkspaceStatus(Model):
    workspace_id: str
    branch: str
    head: str
    worktree: str
    changed_files: list[str]


def _require_branch(conversation: Conversation) -> tuple[str, str]:
    if conversation.branch is None or conversation.project_id is None:
        raise InvalidInput(
            f"conversation {conversation.id} has no project branch (its agent is not scoped to "
            "exactly one project, or it was started without a project_id)"
        )
    return conversation.project_id, conversation.branch


def workspace_spec(
    settings: Settings, conversation: Conversation, repository: str, default_branch: str
) -> WorkspaceSpec:
    """The workspace of a conversation that has a project branch."""
    project_id, branch = _require_branch(conversation)
    return WorkspaceSpec(
        workspace_id=conversation.id,
        client_id=conversation.client_id,
        project_id=project_id,
        repository=repository,
        branch=branch,
        default_branch=default_branch,
        worktree=str(workspaces_root(settings) / conversation.id),
        data_dir=str(settings.data_dir.resolve()),
    )


def workspace_for(
    store: Store, settings: Settings, conversation_id: str, agent_id: str | None
) -> WorkspaceSpec:
    """The workspace a tool call of ``agent_id`` in ``conversation_id`` works in.

    The acting agent must be scoped to the conversation's project (agents touch only their
    projects, even as a participant of someone else's conversation).
    """
    conversation = store.conversations.get(conversation_id)
    project_id, _ = _require_branch(conversation)
    acting = agent_id or conversation.agent_id
    if acting is not None:
        agent = store.agents.get(acting)
        if project_id not in agent.project_ids:
            raise PermissionDenied(f"agent {acting} is not scoped to project {project_id}")
    project = store.projects.get(project_id, client_id=conversation.client_id)
    return workspace_spec(settings, conversation, project.repository, project.default_branch)
