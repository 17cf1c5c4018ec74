"""Workspaces: where code work happens, and the typed answers of its operations.

A branch Wonder made (``wonder/conv-<id>`` for a conversation, ``wonder/run-<id>`` for a workflow
run) has one workspace: a worktree of the branch under ``<workspaces_dir>/<id>``, kept by the
``workspace:<id>`` actor. Whoever works on that branch (the conversation, its delegated children,
the run's tasks and agent nodes) works there. ``WorkspaceSpec`` says which workspace
(``core.projects.workspace_for`` derives it from the store and checks scope); the models below
cross the ``Workspaces`` port (``core.ports``). ``placement`` is the rule that keeps a workspace
actor on the node holding its worktree.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import Field

from core.domain import Model, Persona
from core.settings import Settings
from core.shell_egress import EgressPolicy


class WorkspaceSpec(Model):
    """Which workspace: its key (the branch's owner: a conversation or run id), the project's
    repository and the branch."""

    workspace_id: str
    client_id: str
    project_id: str
    repository: str
    branch: str
    default_branch: str
    worktree: str
    data_dir: str


class SandboxPolicy(Model):
    """Limits of one ``shell.exec`` command (from settings; its network from the persona's
    ``shell_hosts`` narrowed by the operator's hosts for the client)."""

    egress: EgressPolicy | None = Field(
        None, description="Hosts the command may reach through the egress proxy; None: none"
    )
    cpu_s: int = Field(120, ge=1)
    memory_mb: int = Field(2048, ge=16)
    file_size_mb: int = Field(256, ge=1)
    output_bytes: int = Field(64_000, ge=1)
    hidden_paths: list[str] = Field(default_factory=list)
    max_processes: int = Field(256, ge=8)
    cgroup_dir: str | None = None
    tmp_mb: int = Field(512, ge=1)
    disk_mb: int = Field(8192, ge=1)
    max_files: int = Field(500_000, ge=100)

    @classmethod
    def of(cls, settings: Settings, persona: Persona | None, client_id: str) -> SandboxPolicy:
        return cls(
            egress=egress_policy(settings, persona, client_id),
            cpu_s=settings.shell_cpu_s,
            memory_mb=settings.shell_memory_mb,
            file_size_mb=settings.shell_file_size_mb,
            output_bytes=settings.shell_output_bytes,
            hidden_paths=list(settings.shell_hidden_paths),
            max_processes=settings.shell_max_processes,
            cgroup_dir=settings.shell_cgroup_dir,
            tmp_mb=settings.shell_tmp_mb,
            disk_mb=settings.shell_disk_mb,
            max_files=settings.shell_max_files,
        )


def egress_policy(
    settings: Settings, persona: Persona | None, client_id: str
) -> EgressPolicy | None:
    """What a command of ``persona`` (an agent of ``client_id``) may reach: the persona's
    ``shell_hosts`` where the operator's hosts for the client allow them; None when either list is
    empty (the command has no network at all)."""
    asked = persona.constraints.shell_hosts if persona is not None else []
    allowed = settings.shell_client_hosts.get(client_id, settings.shell_allowed_hosts)
    if not asked or not allowed:
        return None
    return EgressPolicy(
        persona_hosts=list(asked),
        operator_hosts=list(allowed),
        networks=list(settings.shell_egress_networks),
        ports=list(settings.shell_egress_ports),
    )


class ExecResult(Model):
    """What a sandboxed command did. ``truncated``: output went past the cap and was cut;
    ``limits_hit``: the limits it ran into (``processes``, ``disk``); ``notice``: why it was
    stopped or held back, when it was."""

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float
    limits_hit: list[str] = Field(default_factory=list)
    notice: str | None = None


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


class WorkspaceRecord(Model):
    """Where a workspace's worktree lives: the Ray node that made it (and that node's address,
    which a restarted Ray on the same host keeps while the node id changes)."""

    spec: WorkspaceSpec
    node_id: str
    node_ip: str
    updated_at: datetime


def placement(record: WorkspaceRecord | None, alive: Mapping[str, str]) -> str | None:
    """The node a workspace actor must start on (hard affinity), or None for anywhere.

    ``alive`` maps the live nodes' ids to their addresses. The node that holds the worktree when
    it is alive; else a live node at the same address (Ray restarted on that host: same disk);
    else None: the node is gone, and the actor checks the branch out afresh wherever it lands
    (committed work is in the repository; uncommitted work on the lost node is lost).
    """
    if record is None:
        return None
    if record.node_id in alive:
        return record.node_id
    same_host = sorted(node for node, address in alive.items() if address == record.node_ip)
    return same_host[0] if same_host else None
