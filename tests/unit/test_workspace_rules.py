"""Who works on which branch, and where a workspace actor may run: the rules of
``core.projects`` (on a real git repository and a real SQLite store) and ``core.workspaces``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.workspace.actor import WorkspaceActor
from cluster.workspaces import actor_options
from core.domain import Agent, PersonaRef
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.git import GitRepository, conversation_branch, run_branch
from core.ids import new_id, utc_now
from core.projects import (
    child_workplace,
    create_project,
    delegated_workplace,
    repository_of,
    start_run_branch,
    workspace_for,
)
from core.settings import Settings
from core.store import Store
from core.workflows import RunContext, WorkflowRun
from core.workspaces import SandboxPolicy, WorkspaceRecord, WorkspaceSpec, placement
from tests.factories import make_client, make_conversation


def record(node_id: str, node_ip: str) -> WorkspaceRecord:
    spec = WorkspaceSpec(
        workspace_id="conv_a",
        client_id="c",
        project_id="p",
        repository="/r",
        branch="wonder/conv-conv_a",
        default_branch="main",
        worktree="/w/conv_a",
        data_dir="/d",
    )
    return WorkspaceRecord(spec=spec, node_id=node_id, node_ip=node_ip, updated_at=utc_now())


def test_a_workspace_actor_is_pinned_to_the_node_holding_its_worktree() -> None:
    alive = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.2"}
    assert placement(None, alive) is None  # never made: anywhere
    assert placement(record("n2", "10.0.0.2"), alive) == "n2"
    # Ray restarted on that host (new node ids, same disk): a node at the same address.
    assert placement(record("old", "10.0.0.2"), alive) == "n2"
    # The node and its host are gone: anywhere (the branch is checked out afresh there).
    assert placement(record("old", "10.0.0.9"), alive) is None
    assert placement(record("n1", "10.0.0.1"), {}) is None


def test_pinned_means_hard_node_affinity() -> None:
    node = "ab" * 28  # a node id: 28 bytes, in hex
    strategy = actor_options(Settings(), node)["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy)
    assert strategy.node_id == node and strategy.soft is False
    assert actor_options(Settings(), None) == {
        "label_selector": {"wonder.io/node-group": "!accelerator"}
    }


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")  # type: ignore[call-arg]


def agent(store: Store, client_id: str, project_ids: list[str]) -> Agent:
    return store.agents.insert(
        Agent(
            id=new_id("agent"),
            client_id=client_id,
            name="a",
            persona_ref=PersonaRef(id="dev"),
            project_ids=project_ids,
            created_at=utc_now(),
        )
    )


def test_delegated_calls_continue_on_their_callers_branch(store: Store, settings: Settings) -> None:
    client_id, _ = make_client(store, "rules")
    project = create_project(store, settings, client_id=client_id, name="p")
    other = create_project(store, settings, client_id=client_id, name="q")
    repo = repository_of(project)
    scoped, outsider, elsewhere = (
        agent(store, client_id, ids) for ids in ([project.id], [], [other.id])
    )
    parent = make_conversation(store, client_id, scoped)
    parent = store.conversations.save(
        parent.model_copy(
            update={"project_id": project.id, "branch": conversation_branch(parent.id)}
        )
    )
    repo.create_branch(conversation_branch(parent.id), "main")

    # A workflow's agent node: the run's branch, or none (it never creates one).
    assert delegated_workplace(scoped, project.id, "wonder/run-r") == (project.id, "wonder/run-r")
    assert delegated_workplace(outsider, project.id, "wonder/run-r") == (None, None)
    assert delegated_workplace(scoped, None, None) == (None, None)

    # A conversation's child: the parent's branch (no new branch)...
    before = repo.branches("wonder/")
    assert child_workplace(store, parent, scoped, "conv_child") == (project.id, parent.branch)
    assert child_workplace(store, parent, outsider, "conv_child") == (None, None)
    assert repo.branches("wonder/") == before
    # ...else, like any new conversation of its agent, its own branch on the agent's project.
    own = child_workplace(store, parent, elsewhere, "conv_child")
    assert own == (other.id, conversation_branch("conv_child"))
    assert repository_of(other).has_branch(conversation_branch("conv_child"))


def test_a_runs_branch_and_its_workspace(store: Store, settings: Settings) -> None:
    client_id, _ = make_client(store, "runs")
    project = create_project(store, settings, client_id=client_id, name="p")
    branch = start_run_branch(store, client_id, project.id, "run_1")
    assert branch == run_branch("run_1")
    assert repository_of(project).require_branch(branch) == repository_of(project).require_branch(
        "main"
    )
    with pytest.raises(NotFound, match="proj_nope"):
        start_run_branch(store, client_id, "proj_nope", "run_2")
    other_client, _ = make_client(store, "other")
    with pytest.raises(NotFound):  # another client's project is not found either
        start_run_branch(store, other_client, project.id, "run_2")

    run = WorkflowRun(
        id="run_1",
        workflow_id="w",
        workflow_version=1,
        client_id=client_id,
        context=RunContext(project_id=project.id, branch=branch),
        created_at=utc_now(),
    )
    store.workflow_runs.insert(run)
    spec = workspace_for(store, settings, conversation_id=None, run_id="run_1")
    assert spec.workspace_id == "run_1" and spec.branch == branch
    assert spec.worktree == str(settings.data_dir.resolve() / "workspaces" / "run_1")
    outsider = agent(store, client_id, [])
    with pytest.raises(PermissionDenied):
        workspace_for(store, settings, conversation_id=None, run_id="run_1", agent_id=outsider.id)
    # A child conversation on the run's branch works in the run's workspace.
    child = make_conversation(store, client_id, agent(store, client_id, [project.id]))
    store.conversations.save(child.model_copy(update={"project_id": project.id, "branch": branch}))
    assert workspace_for(store, settings, conversation_id=child.id).workspace_id == "run_1"
    with pytest.raises(InvalidInput, match="workspace"):
        workspace_for(store, settings, conversation_id=None, run_id=None)


def test_the_workspaces_dir_may_be_elsewhere(store: Store, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", workspaces_dir=tmp_path / "local")  # type: ignore[call-arg]
    client_id, _ = make_client(store, "dir")
    project = create_project(store, settings, client_id=client_id, name="p")
    start_run_branch(store, client_id, project.id, "run_1")
    store.workflow_runs.insert(
        WorkflowRun(
            id="run_1",
            workflow_id="w",
            workflow_version=1,
            client_id=client_id,
            context=RunContext(project_id=project.id, branch=run_branch("run_1")),
            created_at=utc_now(),
        )
    )
    spec = workspace_for(store, settings, conversation_id=None, run_id="run_1")
    assert spec.worktree == str((tmp_path / "local" / "run_1").resolve())
    # A repository may not be named inside it.
    (tmp_path / "local" / "x").mkdir(parents=True)
    with pytest.raises(PermissionDenied, match="data directory"):
        create_project(
            store, settings, client_id=client_id, name="x", repository=str(tmp_path / "local" / "x")
        )


class Stays:
    def exit(self) -> None:
        return None


@pytest.fixture
def node_local_dir() -> Iterator[Path]:
    """A directory outside /tmp (which every sandbox hides anyway): a node-local workspaces dir."""
    path = Path(tempfile.mkdtemp(prefix="wonder-workspaces-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_workspaces_dir_outside_the_data_dir_is_hidden_from_commands(
    tmp_path: Path, node_local_dir: Path
) -> None:
    """Every other worktree stays invisible when worktrees live outside the data dir (a real
    bubblewrap sandbox, no Ray)."""
    repo = GitRepository.init_bare(tmp_path / "data" / "projects" / "p" / "code.git", "main")
    actors = {}
    for key in ("conv_a", "conv_b"):
        repo.create_branch(conversation_branch(key), "main")
        spec = WorkspaceSpec(
            workspace_id=key,
            client_id="c",
            project_id="p",
            repository=str(repo.path),
            branch=conversation_branch(key),
            default_branch="main",
            worktree=str(node_local_dir / key),
            data_dir=str(tmp_path / "data"),
        )
        actors[key] = WorkspaceActor(spec, 3600, Stays())
    await actors["conv_b"].write("secret.txt", "b's\n")
    policy = SandboxPolicy(hidden_paths=[])
    seen = await actors["conv_a"].exec(f"ls {node_local_dir}", 10, policy)
    assert seen.exit_code == 0 and seen.stdout.split() == ["conv_a"], seen
    peek = await actors["conv_a"].exec(
        f"cat {node_local_dir / 'conv_b' / 'secret.txt'}", 10, policy
    )
    assert peek.exit_code != 0 and "b's" not in peek.stdout
