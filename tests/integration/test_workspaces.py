"""Workspaces on real git repositories and real Ray: conversation branches, the sandbox of
``shell.exec``, ``repo.*`` confinement, explicit merges.

Every action runs the way a tool call runs it: a task on the executor (a Ray remote function)
reaching the named detached ``workspace:<conversation_id>`` actor through the ``Workspaces`` port.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import wiring
from cluster.naming import existing_actor, workspace_actor_name
from cluster.workspaces import RayWorkspaces
from core.conversations import create_conversation
from core.domain import Agent, Constraints, Conversation, Persona, TaskAction, TaskDef, Tool
from core.git import BRANCH_PREFIX, GitRepository, conversation_branch, run_branch
from core.ids import new_id, utc_now
from core.ports import TaskContext, TaskOutcome
from core.projects import (
    create_project,
    remove_conversation_workspaces,
    repository_of,
    start_conversation_branch,
    workspace_for,
    workspaces_root,
)
from core.store import Store
from core.workflows import RunStatus, WorkflowDef
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile, task_tool
from tests.integration.access import conversations, get_history, start_workflow_run, wait_for_run


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

    def __init__(
        self,
        cluster: Cluster,
        conversation: Conversation,
        agent_id: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.conversation = conversation
        self.agent_id = agent_id
        self.env = {**cluster.env, **(env or {})}  # the operator's settings for these calls

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
            settings_env=self.env,
        )
        runner = wiring.task_runner(self.env)
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

    spec = workspace_for(
        store, one.cluster.settings, conversation_id=one.conversation.id, agent_id=one.agent_id
    )
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


def test_network_only_through_the_proxy_when_persona_and_operator_allow(
    ray_cluster: Cluster, tcp_server: int
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "net")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="net")
    closed = new_agent(store, client_id, [project.id])
    open_ = new_agent(store, client_id, [project.id], shell_hosts=[f"127.0.0.1:{tcp_server}"])
    operator = {
        "WONDER_SHELL_ALLOWED_HOSTS": f'["127.0.0.1:{tcp_server}"]',
        "WONDER_SHELL_EGRESS_NETWORKS": '["127.0.0.1/32"]',
    }
    sessions = [
        Session(ray_cluster, new_conversation(store, agent, project.id), agent.id, operator)
        for agent in (closed, open_)
    ]
    direct = (
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', "
        f'{tcp_server}), timeout=3); print(s.recv(10).decode().strip())"'
    )
    # The one way out: a CONNECT tunnel through the egress proxy (HTTPS_PROXY names it).
    tunnel = f"""python3 - <<'EOF'
import os, socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT 127.0.0.1:{tcp_server} HTTP/1.1\\r\\n\\r\\n")
data = b""
while chunk := s.recv(100):
    data += chunk
head, _, body = data.decode().partition("\\r\\n\\r\\n")
print(head)
print(body.strip())
print(os.environ["HTTPS_PROXY"])
EOF"""
    try:
        for session in sessions:
            blocked = session.sh(direct)
            assert blocked["exit_code"] != 0 and "pong" not in blocked["stdout"], blocked
        assert sessions[0].sh(tunnel)["exit_code"] != 0  # no proxy without hosts
        allowed = sessions[1].sh(tunnel)
        assert allowed["stdout"].splitlines() == [
            "HTTP/1.1 200 Connection Established",
            "pong",
            "http://127.0.0.1:3128",
        ], allowed
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
    # Merging is an explicit API call or a workflow step, never a conversation's tool call.
    code, message = one.error("repo.merge")
    assert code == "PERMISSION_DENIED" and "workflow step" in message


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
    spec = workspace_for(
        store, ray_cluster.settings, conversation_id=one.conversation.id, agent_id=one.agent_id
    )
    # This adapter creates actors that idle out in 1 s.
    quick = RayWorkspaces(store, ray_cluster.settings, idle_ttl_s=1.0)
    name = workspace_actor_name(spec.workspace_id)
    asyncio.run(quick.write(spec, "draft.txt", "uncommitted work\n"))
    assert existing_actor(name) is not None
    wait_for(lambda: existing_actor(name) is None, timeout=30, interval=0.2)
    again = asyncio.run(quick.read(spec, "draft.txt", 1000))  # re-created on the same worktree
    assert again.content == "uncommitted work\n"
    assert asyncio.run(quick.status(spec)).changed_files == ["draft.txt"]


def test_a_workspace_actor_comes_back_on_its_node_or_from_its_branch(
    project_pair: tuple[Session, Session, Store, str], ray_cluster: Cluster
) -> None:
    one, _, store, _ = project_pair
    key = one.conversation.id
    one.ok("repo.write", path="kept.txt", content="committed\n")
    one.ok("repo.commit", message="keep")
    one.ok("repo.write", path="draft.txt", content="uncommitted\n")
    here = ray.get_runtime_context().get_node_id()
    found = store.workspaces.get(key)
    assert found is not None and found.node_id == here and found.spec.worktree.endswith(key)
    workspaces = wiring.workspaces(ray_cluster.env)

    # Evicted, then called again: pinned to the node that holds the worktree, draft and all.
    assert workspaces.stop(key)
    assert one.ok("repo.read", path="draft.txt")["content"] == "uncommitted\n"

    # Its node is gone, and its disk with it: the branch is checked out afresh elsewhere (here),
    # with the committed work; the uncommitted draft was lost with the node.
    store.workspaces.put(found.model_copy(update={"node_id": "f" * 56, "node_ip": "192.0.2.1"}))
    assert workspaces.stop(key)
    shutil.rmtree(found.spec.worktree)
    assert one.ok("repo.read", path="kept.txt")["content"] == "committed\n"
    assert one.error("repo.read", path="draft.txt")[0] == "NOT_FOUND"
    moved = store.workspaces.get(key)
    assert moved is not None and moved.node_id == here  # recorded where it lives now


def coder_agent(store: Store, client_id: str, project_id: str, value: str) -> Agent:
    """A scripted agent scoped to the project: writes ``app.py``, commits, answers."""
    write = task_tool(store, "write_file", [{"kind": "repo.write"}])
    commit = task_tool(store, "commit", [{"kind": "repo.commit"}])
    script = [
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "app.py", "content": value}}]},
        {"tool_calls": [{"name": "commit", "arguments": {"message": f"coder: {value.strip()}"}}]},
        {"reply": "committed"},
    ]
    profile = scripted_profile(store, script)
    return make_agent(store, client_id, profile, [write, commit], project_ids=[project_id])


def put_workflow(store: Store, body: dict[str, Any]) -> WorkflowDef:
    definition = WorkflowDef.model_validate({"id": f"wf-{new_id().lower()}", **body})
    return store.workflows.put(definition, utc_now())


async def test_a_workflows_agent_node_commits_on_the_runs_branch(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store, "wf-branch")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="wf")
    repo = repository_of(project)
    coder = coder_agent(store, client_id, project.id, "VALUE = 1\n")
    merge = store.tasks.put(
        TaskDef(id=f"merge-{new_id().lower()}", actions=[TaskAction(kind="repo.merge")]), utc_now()
    )
    merge_node = {"id": "merge", "kind": "task", "target_id": merge.id}
    workflow = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "code",
                    "kind": "agent",
                    "target_id": coder.id,
                    "input_mapping": {"message": {"const": "set the value"}},
                },
                merge_node,
            ],
            "edges": [{"from": "code", "to": "merge"}],
            "output_mapping": {"answer": "nodes.code.answer", "merged": "nodes.merge.status"},
        },
    )
    # A task step that writes the same file otherwise, then the same merge step.
    edit = store.tasks.put(
        TaskDef(
            id=f"edit-{new_id().lower()}",
            actions=[
                TaskAction(kind="repo.write", params={"path": "app.py", "content": "VALUE = 2\n"}),
                TaskAction(kind="repo.commit", params={"message": "task: value 2"}),
            ],
        ),
        utc_now(),
    )
    rival = put_workflow(
        store,
        {
            "nodes": [{"id": "edit", "kind": "task", "target_id": edit.id}, merge_node],
            "edges": [{"from": "edit", "to": "merge"}],
        },
    )
    # The rival's branch leaves the default branch before the first run merges (as a run started
    # meanwhile would); starting it later with that id finds its branch where it was.
    rival_id = new_id("run")
    repo.create_branch(run_branch(rival_id), project.default_branch)
    runs: list[str] = []
    try:
        run_id = await start_workflow_run(
            workflow.id, {}, client_id=client_id, project_id=project.id
        )
        runs.append(run_id)
        run = await wait_for_run(run_id, 120)
        assert run.status is RunStatus.COMPLETED, run.error
        assert run.output == {"answer": "committed", "merged": "merged"}
        branch = run_branch(run_id)
        assert run.context.project_id == project.id and run.context.branch == branch
        assert repo.log(branch, 1)[0]["subject"] == "coder: VALUE = 1"
        assert repo.git("show", f"{project.default_branch}:app.py") == "VALUE = 1\n"

        # The agent node's turn ran in a child conversation on the run's branch: no branch of
        # its own, no workspace of its own.
        [code] = [r for r in get_history(run_id) if r.node_id == "code"]
        child = store.conversations.get(code.output["conversation_id"])
        assert child.project_id == project.id and child.branch == branch
        assert repo.branches(BRANCH_PREFIX) == []
        assert existing_actor(workspace_actor_name(run_id)) is not None
        assert existing_actor(workspace_actor_name(child.id)) is None
        assert not (workspaces_root(ray_cluster.settings) / child.id).exists()

        # The rival writes the file otherwise on its branch; its merge step meets the conflict:
        # the run fails naming the file, and the default branch stays as the first merge left it.
        head = repo.require_branch(project.default_branch)
        runs.append(rival_id)
        await start_workflow_run(
            rival.id, {}, client_id=client_id, project_id=project.id, run_id=rival_id
        )
        failed = await wait_for_run(rival_id, 120)
        assert failed.status is RunStatus.FAILED and failed.error is not None
        assert failed.error.code == "CONFLICT" and "app.py" in failed.error.message, failed.error
        assert repo.require_branch(project.default_branch) == head
    finally:
        for key in runs:
            wiring.workspaces(ray_cluster.env).stop(key)


async def test_a_delegated_child_works_on_its_parents_branch_and_delete_cleans_up(
    ray_cluster: Cluster,
) -> None:
    store, settings = ray_cluster.store, ray_cluster.settings
    client_id, _ = make_client(store, "delegate-branch")
    project = create_project(store, settings, client_id=client_id, name="team")
    repo = repository_of(project)
    coder = coder_agent(store, client_id, project.id, "VALUE = 3\n")
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-coder-{new_id().lower()}",
            name="ask_coder",
            description="delegate to the coder",
            input_schema={"type": "object", "properties": {"input": {"type": "string"}}},
            target_type="agent",
            target_id=coder.id,
            invocation_mode="delegate",
        ),
        utc_now(),
    )
    script = [
        {"tool_calls": [{"name": "ask_coder", "arguments": {"input": "set the value"}}]},
        {"reply": "the coder did it"},
    ]
    profile = scripted_profile(store, script)
    boss = make_agent(store, client_id, profile, [ask], project_ids=[project.id])
    parent = new_conversation(store, boss, project.id)

    posted = await conversations().post_message(parent.id, "get it done", "user-1")
    turn = await conversations().wait_for_turn(parent.id, posted.turn_id, 120)
    assert turn.status.value == "completed", turn
    [child] = store.conversations.list(client_id, parent_id=parent.id)
    assert child.project_id == project.id and child.branch == parent.branch
    branch = parent.branch or ""
    assert repo.log(branch, 1)[0]["subject"] == "coder: VALUE = 3"
    assert not repo.has_branch(conversation_branch(child.id))
    worktree = workspaces_root(settings) / parent.id
    assert (worktree / "app.py").read_text() == "VALUE = 3\n"
    assert not (workspaces_root(settings) / child.id).exists()

    # Deleting the conversation (as DELETE /v1/conversations/{id} does, children included)
    # removes the workspace it owns: worktree, actor, record. Its branch is not merged: kept.
    tree = store.conversation_tree(parent.id)
    assert sorted(tree) == sorted([parent.id, child.id])
    kept = await remove_conversation_workspaces(
        store, settings, wiring.workspaces(ray_cluster.env), tree
    )
    assert kept == [branch] and repo.has_branch(branch)
    assert not worktree.exists() and str(worktree) not in repo.git("worktree", "list")
    assert existing_actor(workspace_actor_name(parent.id)) is None
    assert store.workspaces.get(parent.id) is None
