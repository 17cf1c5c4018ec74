"""Workspaces on real git repositories and real Ray: conversation branches, the sandbox of
``shell.exec``, ``repo.*`` confinement, explicit merges.

Every action runs the way a tool call runs it: a task on the executor (a Ray remote function)
reaching the named detached ``workspace:<conversation_id>`` actor through the ``Workspaces`` port.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import wiring
from cluster.naming import existing_actor, workspace_actor_name
from cluster.workspaces import RayWorkspaces
from core.conversations import create_conversation
from core.domain import Agent, Constraints, Conversation, Persona, TaskAction, TaskDef
from core.git import GitRepository
from core.ids import new_id, utc_now
from core.ports import TaskContext, TaskOutcome
from core.projects import create_project, repository_of, start_conversation_branch
from core.store import Store
from core.workspaces import workspace_for
from tests.conftest import Cluster, wait_for
from tests.factories import make_client


def new_agent(store: Store, client_id: str, project_ids: list[str], **constraints: Any) -> Agent:
    persona = Persona(id="dev", system_prompt="You code.", constraints=Constraints(**constraints))
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name="dev",
        persona=persona,
        project_ids=project_ids,
        created_at=utc_now(),
    )
    return store.agents.insert(agent)


def new_conversation(store: Store, agent: Agent, project_id: str) -> Conversation:
    project = store.projects.get(project_id)
    conversation_id = new_id("conv")
    branch = start_conversation_branch(project, conversation_id)
    return create_conversation(
        store,
        client_id=agent.client_id,
        agent_id=agent.id,
        conversation_id=conversation_id,
        project_id=project.id,
        branch=branch,
    )


class Session:
    """One conversation's view: run an action as its agent's tool call would."""

    def __init__(self, cluster: Cluster, conversation: Conversation, agent_id: str) -> None:
        self.cluster = cluster
        self.conversation = conversation
        self.agent_id = agent_id

    def run(self, kind: str, **params: Any) -> TaskOutcome:
        task = TaskDef(
            id=f"t-{kind.replace('.', '-')}", actions=[TaskAction(kind=kind, params=params)]
        )
        return self.run_outcome(task, {})

    def run_task(self, task: TaskDef, task_input: dict[str, Any]) -> Any:
        outcome = self.run_outcome(task, task_input)
        assert outcome.success, outcome.error
        return outcome.result

    def run_outcome(self, task: TaskDef, task_input: dict[str, Any]) -> TaskOutcome:
        context = TaskContext(
            client_id=self.conversation.client_id,
            conversation_id=self.conversation.id,
            agent_id=self.agent_id,
            settings_env=self.cluster.env,
        )
        runner = wiring.task_runner(self.cluster.env)
        return asyncio.run(runner.run(task, task_input, context))

    def ok(self, kind: str, **params: Any) -> Any:
        outcome = self.run(kind, **params)
        assert outcome.success, outcome.error
        return outcome.result

    def error(self, kind: str, **params: Any) -> tuple[str, str]:
        outcome = self.run(kind, **params)
        assert not outcome.success and outcome.error is not None, outcome.result
        return str(outcome.error.code), outcome.error.message

    def sh(self, command: str, timeout_s: float = 30) -> dict[str, Any]:
        result: dict[str, Any] = self.ok("shell.exec", command=command, timeout_s=timeout_s)
        return result


@pytest.fixture
def project_pair(ray_cluster: Cluster) -> Iterator[tuple[Session, Session, Store, str]]:
    store = ray_cluster.store
    client_id, _ = make_client(store, "ws")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="ws")
    agent = new_agent(store, client_id, [project.id])
    one = Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
    two = Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
    yield one, two, store, project.id
    stopper = wiring.workspaces(ray_cluster.env)
    stopper.stop(one.conversation.id)
    stopper.stop(two.conversation.id)


def test_two_conversations_work_on_their_own_branches_and_merge(
    project_pair: tuple[Session, Session, Store, str],
) -> None:
    one, two, store, project_id = project_pair
    project = store.projects.get(project_id)
    one.ok("repo.write", path="src/app.py", content="VALUE = 1\n")
    two.ok("repo.write", path="src/app.py", content="VALUE = 2\n")
    two.ok("repo.write", path="notes.md", content="two's notes\n")

    assert one.ok("repo.read", path="src/app.py")["content"] == "VALUE = 1\n"
    assert two.ok("repo.read", path="src/app.py")["content"] == "VALUE = 2\n"
    assert "notes.md" not in one.ok("repo.tree")["entries"]
    assert one.ok("repo.tree")["entries"] == ["src/", "src/app.py"]
    assert one.ok("repo.diff")["files"] == ["src/app.py"]
    hits = one.ok("repo.search", pattern="VALUE = [0-9]")["hits"]
    assert hits == [{"path": "src/app.py", "line": 1, "text": "VALUE = 1"}]

    first = one.ok("repo.commit", message="one: value 1")
    second = two.ok("repo.commit", message="two: value 2")
    assert first["branch"] == one.conversation.branch and first["files"] == ["src/app.py"]
    assert second["files"] == ["notes.md", "src/app.py"]
    assert one.ok("repo.commit", message="again")["commit"] is None
    repo = repository_of(project)
    assert repo.require_branch(one.conversation.branch or "") == first["commit"]
    assert one.ok("repo.diff", against="default_branch")["files"] == ["src/app.py"]

    # Inside the sandbox git sees the branch (read-only git dir): log and status work.
    log = one.sh("git log --format=%s -n1 && git status --porcelain")
    assert log["exit_code"] == 0 and log["stdout"] == "one: value 1\n", log

    merged = repo.merge(one.conversation.branch or "", project.default_branch)
    assert merged.status == "merged"
    conflicted = repo.merge(two.conversation.branch or "", project.default_branch)
    assert conflicted.status == "conflicts" and conflicted.conflicts == ("src/app.py",)
    assert repo.require_branch(project.default_branch) == merged.commit

    spec = workspace_for(store, one.cluster.settings, one.conversation.id, one.agent_id)
    status = asyncio.run(wiring.workspaces(one.cluster.env).status(spec))
    assert status.branch == one.conversation.branch and status.changed_files == []


def test_shell_exec_sandbox(
    project_pair: tuple[Session, Session, Store, str], ray_cluster: Cluster
) -> None:
    one, two, store, _ = project_pair
    two.ok("repo.write", path="secret.txt", content="two's secret\n")
    two_tree = Path(two.ok("shell.exec", command="pwd")["stdout"].strip())
    assert two_tree.name == two.conversation.id

    ran = one.sh("echo hello > made.txt && cat made.txt && echo oops >&2; exit 3")
    assert ran["exit_code"] == 3 and ran["stdout"] == "hello\n" and ran["stderr"] == "oops\n"
    assert one.ok("repo.read", path="made.txt")["content"] == "hello\n"

    # Writes outside the worktree fail: the system, Wonder's data dir, the project's git dir.
    data_dir = ray_cluster.data_dir.resolve()
    repository = store.projects.get(one.conversation.project_id or "").repository
    for target in ("/etc/wonder-x", "/usr/wonder-x", f"{data_dir}/x", f"{repository}/x"):
        denied = one.sh(f"echo x > {target}")
        assert denied["exit_code"] != 0, (target, denied)
        assert not Path(target).exists()
    # Another conversation's worktree (and the store) are not even visible.
    peek = one.sh(f"cat {two_tree}/secret.txt")
    assert peek["exit_code"] != 0 and "two's secret" not in peek["stdout"], peek
    # The data dir shows only the empty mount points leading to this worktree: no store.
    assert one.sh(f"ls {data_dir}")["stdout"].split() == ["projects", "workspaces"]
    assert one.sh(f"ls {data_dir}/workspaces")["stdout"].split() == [one.conversation.id]
    scrubbed = one.sh("echo $HOME; env | sort | cut -d= -f1 | tr '\\n' ' '")
    assert scrubbed["stdout"] == "/tmp\nHOME LANG PATH PWD TERM "
    # A private /tmp: nothing of the host's, only the mount points down to this worktree.
    in_tmp = [data_dir.relative_to("/tmp").parts[0]] if Path("/tmp") in data_dir.parents else []
    assert one.sh("ls -A /tmp")["stdout"].split() == in_tmp
    # No capabilities: no remounting the read-only root.
    assert one.sh("mount -o remount,rw / 2>/dev/null")["exit_code"] != 0
    # Its own PID namespace: only its processes.
    assert int(one.sh("ls /proc | grep -c '^[0-9]'")["stdout"]) <= 4


@pytest.fixture
def tcp_server() -> Iterator[int]:
    """A TCP server on the host's loopback that answers ``pong``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"pong\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    server.close()


def test_network_only_when_the_persona_allows_hosts(ray_cluster: Cluster, tcp_server: int) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "net")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="net")
    closed = new_agent(store, client_id, [project.id])
    open_ = new_agent(store, client_id, [project.id], shell_hosts=["127.0.0.1"])
    sessions = [
        Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
        for agent in (closed, open_)
    ]
    probe = (
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
        f'{tcp_server}), timeout=3); print(s.recv(10).decode().strip())"'
    )
    try:
        blocked = sessions[0].sh(probe)
        assert blocked["exit_code"] != 0 and "pong" not in blocked["stdout"], blocked
        allowed = sessions[1].sh(probe)
        assert allowed["exit_code"] == 0 and allowed["stdout"] == "pong\n", allowed
    finally:
        for session in sessions:
            wiring.workspaces(ray_cluster.env).stop(session.conversation.id)


def _processes_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def test_timeout_kills_the_whole_command_and_output_is_capped(
    project_pair: tuple[Session, Session, Store, str],
) -> None:
    one, _, _, _ = project_pair
    marker = f"100.{uuid.uuid4().int % 10**9}"
    timed = one.sh(f"setsid sleep {marker} & sleep {marker}; echo never", timeout_s=1)
    assert timed["timed_out"] and timed["exit_code"] is None and "never" not in timed["stdout"]
    assert _processes_with(f"sleep {marker}") == []

    loud = one.sh("head -c 200000 /dev/zero | tr '\\0' x; echo done >&2")
    assert loud["truncated"] and len(loud["stdout"]) == 64_000 and loud["stderr"] == "done\n"
    quiet = one.sh("echo small")
    assert not quiet["truncated"] and quiet["stdout"] == "small\n"


def test_repo_paths_stay_inside_the_worktree(
    project_pair: tuple[Session, Session, Store, str], ray_cluster: Cluster
) -> None:
    one, two, _, _ = project_pair
    two.ok("repo.write", path="secret.txt", content="two's secret\n")
    two_tree = two.ok("shell.exec", command="pwd")["stdout"].strip()
    one.sh(f"ln -s {two_tree} other && ln -s /etc/passwd passwd && ln -s / root")
    for kind, params in (
        ("repo.read", {"path": "../secret.txt"}),
        ("repo.read", {"path": f"{two_tree}/secret.txt"}),
        ("repo.read", {"path": "other/secret.txt"}),
        ("repo.read", {"path": "passwd"}),
        ("repo.write", {"path": "../../escape.txt", "content": "x"}),
        ("repo.write", {"path": "root/tmp/escape.txt", "content": "x"}),
        ("repo.write", {"path": ".git/config", "content": "x"}),
        ("repo.tree", {"path": "root"}),
        ("repo.search", {"pattern": "root", "path": "../"}),
    ):
        code, message = one.error(kind, **params)
        assert code == "PERMISSION_DENIED", (kind, params, code, message)
        assert "worktree" in message or ".git" in message, message
    assert not Path(two_tree, "..", "escape.txt").resolve().exists()
    code, _ = one.error("repo.read", path="missing.txt")
    assert code == "NOT_FOUND"


def test_agents_touch_only_their_projects(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "scope")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="scoped")
    member = new_agent(store, client_id, [project.id])
    outsider = new_agent(store, client_id, [])
    conversation = new_conversation(store, member, project.id)
    code, message = Session(ray_cluster, conversation, outsider.id).error("repo.tree")
    assert code == "PERMISSION_DENIED" and project.id in message
    plain = create_conversation(store, client_id=client_id, agent_id=outsider.id)
    code, message = Session(ray_cluster, plain, outsider.id).error("shell.exec", command="true")
    assert code == "INVALID_INPUT" and "no project branch" in message
    assert GitRepository(Path(project.repository)).has_branch(conversation.branch or "")


def test_an_idle_workspace_actor_exits_and_comes_back_with_its_files(
    project_pair: tuple[Session, Session, Store, str], ray_cluster: Cluster
) -> None:
    one, _, store, _ = project_pair
    spec = workspace_for(store, ray_cluster.settings, one.conversation.id, one.agent_id)
    quick = RayWorkspaces(idle_ttl_s=1.0)  # this adapter creates actors that idle out in 1 s
    name = workspace_actor_name(spec.workspace_id)
    asyncio.run(quick.write(spec, "draft.txt", "uncommitted work\n"))
    assert existing_actor(name) is not None
    wait_for(lambda: existing_actor(name) is None, timeout=30, interval=0.2)
    again = asyncio.run(quick.read(spec, "draft.txt", 1000))  # re-created on the same worktree
    assert again.content == "uncommitted work\n"
    assert asyncio.run(quick.status(spec)).changed_files == ["draft.txt"]
