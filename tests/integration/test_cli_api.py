"""The ``wonder`` commands that mirror the API, run as subprocesses against the session's real
gateway (real HTTP and WebSocket, a scripted agent): their output, their exit codes, and
``--json`` that parses, for each resource group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import bootstrap, wiring
from cluster.cli import doctor
from core.ids import new_id
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client, unique
from tests.integration.test_gateway_stream import scripted_agent

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


class Wonder:
    """``python -m cluster.cli ARGS`` with the gateway's URL and a client's key."""

    def __init__(self, url: str, key: str, data_dir: Path) -> None:
        self.url, self.key, self.data_dir = url, key, data_dir

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.data_dir),
            "PYTHONPATH": str(ROOT),
            "WONDER_DATA_DIR": str(self.data_dir),
        }

    def command(self, *args: str, key: str | None = None) -> list[str]:
        given = ["--url", self.url, "--api-key", key or self.key]
        return [sys.executable, "-m", "cluster.cli", *given, *args]

    def __call__(self, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args, key=key),
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )

    def ok(self, *args: str) -> str:
        result = self(*args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def fails(self, code: int, *args: str, key: str | None = None) -> str:
        """The one error line of a command that must exit with ``code``."""
        result = self(*args, key=key)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert result.stderr.startswith("wonder: ") and result.stderr.count("\n") == 1
        return result.stderr


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "cli")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        yield client


@pytest.fixture
def wonder(gateway_url: str, key: str, tmp_path: Path) -> Wonder:
    return Wonder(gateway_url, key, tmp_path)


def persona_of(api: httpx.Client, agent_id: str) -> str:
    return str(api.get(f"/v1/agents/{agent_id}").json()["persona_ref"]["id"])


def test_agents(wonder: Wonder, api: httpx.Client) -> None:
    persona = persona_of(api, scripted_agent(api, [{"reply": "hi"}]))
    created = wonder.ok("agents", "create", "helper", "--persona", persona)
    agent_id = created.split()[0]
    assert agent_id.startswith("agent_") and f"(persona {persona})" in created
    listed = wonder.json("agents", "list")
    assert agent_id in [a["id"] for a in listed["items"]]
    assert api.get("/v1/agents").json() == listed  # the API's own JSON
    shown = wonder.ok("agents", "show", agent_id)
    assert "name: helper" in shown and f"id: {persona}" in shown
    assert wonder.json("agents", "show", agent_id)["id"] == agent_id
    table = wonder.ok("agents", "list")
    assert table.splitlines()[0].split() == ["AGENT", "NAME", "PERSONA", "CREATED"]

    assert wonder.fails(3, "agents", "show", "agent_nope") == (
        "wonder: agent agent_nope not found (NOT_FOUND, HTTP 404)\n"
    )
    assert "persona_ref" in wonder.fails(3, "agents", "create", "x", "--persona", "no-such")
    assert "UNAUTHORIZED" in wonder.fails(4, "agents", "list", key="wk_not_a_key")


def test_conversations_send_turns_tail_fork_complete_delete(
    wonder: Wonder, api: httpx.Client
) -> None:
    agent_id = scripted_agent(api, [{"reply": "you said {{last_user}}"}])
    conversation = wonder.json("conversations", "create", "--agent", agent_id, "--title", "cli")
    conv = conversation["id"]
    assert conversation["agent_id"] == agent_id and conversation["title"] == "cli"

    # send --wait follows the turn on the stream and prints the reply.
    assert wonder.ok("conversations", "send", conv, "hello", "--wait") == "agent> you said hello\n"
    listed = wonder.json("conversations", "list", "--limit", "200", "--all")
    assert conv in [c["id"] for c in listed["items"]] and listed["next_cursor"] is None
    assert wonder.json("conversations", "show", conv)["id"] == conv

    (turn,) = wonder.json("turns", "list", conv)["items"]
    assert turn["status"] == "completed" and turn["input"] == "hello"
    shown = wonder.ok("turns", "show", conv, turn["id"])
    assert shown.startswith(f"turn       {turn['id']}  (completed)\ninput      hello\n")
    assert "moves      " in shown
    detail = wonder.json("turns", "show", conv, turn["id"])
    assert detail == api.get(f"/v1/conversations/{conv}/turns/{turn['id']}").json()
    assert "TURN_ID" not in wonder.fails(3, "turns", "show", conv, "turn_nope")

    # tail --no-follow: the history; --json: one event per line, as the API stores them.
    history = wonder.ok("conversations", "tail", conv, "--no-follow")
    assert "> hello\n" in history and "agent> you said hello\n" in history
    lines = wonder.ok("conversations", "tail", conv, "--after-seq", "0", "--no-follow", "--json")
    events = [json.loads(line) for line in lines.splitlines()]
    stored = api.get(f"/v1/conversations/{conv}/events").json()["items"]
    assert events == stored and events[0]["seq"] == 1

    forked = wonder.ok("conversations", "fork", conv, "--title", "what if")
    fork_id = forked.split()[0]
    assert forked == f"{fork_id}  (fork of {conv} at {turn['id']})\n"
    assert wonder.json("conversations", "show", fork_id)["forked_from_conversation_id"] == conv
    assert "fork of" in wonder.ok("conversations", "list", "--limit", "200", "--all")
    assert "has forks" in wonder.fails(1, "conversations", "delete", conv)  # 409

    assert wonder.ok("conversations", "complete", conv) == f"{conv} completed\n"
    assert "is completed" in wonder.fails(1, "conversations", "send", conv, "again")
    assert wonder.json("conversations", "delete", fork_id) == {"deleted": [fork_id]}
    assert wonder.ok("conversations", "delete", conv) == f"deleted {conv}\n"
    assert "not found" in wonder.fails(3, "conversations", "show", conv)
    assert "not an id" in wonder.fails(2, "conversations", "show", f"{conv}/complete")


def test_tail_follows_the_stream_until_the_turn_ends(wonder: Wonder, api: httpx.Client) -> None:
    """A tail started before the turn prints its tokens as they stream and stops when it ends
    (``--once``), from the ``seq`` it was given: nothing before it, nothing missed after."""
    agent_id = scripted_agent(api, [{"reply": "echo {{last_user}}"}])
    conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    first = api.post(f"/v1/conversations/{conv}/messages", json={"content": "one"}).json()

    def ended(turn_id: str) -> bool:
        return api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json()["status"] != "active"

    wait_for(lambda: ended(first["turn_id"]), timeout=60, interval=0.2)
    last = api.get(f"/v1/conversations/{conv}/events", params={"tail": "true"}).json()["items"]
    after = str(last[-1]["seq"])
    with subprocess.Popen(
        wonder.command("conversations", "tail", conv, "--after-seq", after, "--once"),
        env=wonder.env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as tail:
        api.post(f"/v1/conversations/{conv}/messages", json={"content": "two"})
        out, err = tail.communicate(timeout=120)
    assert tail.returncode == 0, err
    assert out.endswith("agent> echo two\n") and "> two\n" in out
    assert "one" not in out  # what came before the given seq is not replayed

    with subprocess.Popen(
        wonder.command("conversations", "tail", conv, "--once", "--json", "--lines", "0"),
        env=wonder.env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as tail:
        assert tail.stderr is not None  # it says when it is live: post after that
        assert tail.stderr.readline().startswith(f"[following {conv} after seq ")
        posted = api.post(f"/v1/conversations/{conv}/messages", json={"content": "three"})
        out, err = tail.communicate(timeout=120)
    assert tail.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "turn.completed"
    assert events[-1]["turn_id"] == posted.json()["turn_id"]


def put_echo_workflow(api: httpx.Client) -> str:
    suffix = new_id().lower()
    task_id, workflow_id = f"echo-{suffix}", f"shout-{suffix}"
    task = {"actions": [{"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}]}
    assert api.put(f"/v1/tasks/{task_id}", json=task).status_code == 200
    workflow = {
        "input_schema": {"type": "object", "required": ["word"]},
        "nodes": [{"id": "say", "kind": "task", "target_id": task_id}],
        "output_mapping": {"said": "nodes.say"},
    }
    assert api.put(f"/v1/workflows/{workflow_id}", json=workflow).status_code == 200
    return workflow_id


def test_workflows(wonder: Wonder, api: httpx.Client, tmp_path: Path) -> None:
    workflow_id = put_echo_workflow(api)
    view = wonder.json("workflows", "run", workflow_id, "--input", '{"word": "hi"}', "--wait", "60")
    run = view["run"]
    assert run["status"] == "completed" and run["workflow_id"] == workflow_id
    status = wonder.ok("workflows", "status", run["id"])
    assert status.startswith(f"run       {run['id']}  (completed)\nworkflow  {workflow_id} v1")
    assert "nodes\n" in status and "say" in status
    runs = wonder.json("workflows", "list", "--workflow", workflow_id)["items"]
    assert run["id"] in [r["id"] for r in runs]
    assert wonder.json("workflows", "cancel", run["id"])["run"]["status"] == "completed"

    given = tmp_path / "input.yaml"
    given.write_text("word: from a file\n")
    started = wonder.ok("workflows", "run", workflow_id, "--input-file", str(given))
    assert started.startswith("run       run_")  # answered at once, still going or done

    assert "INVALID_INPUT" in wonder.fails(2, "workflows", "run", workflow_id)  # no "word"
    assert "not JSON" in wonder.fails(2, "workflows", "run", workflow_id, "--input", "{nope")
    assert "NOT_FOUND" in wonder.fails(3, "workflows", "run", "no-such-workflow")
    assert "NOT_FOUND" in wonder.fails(3, "workflows", "status", "run_nope")


def test_memories(wonder: Wonder, api: httpx.Client, embedder_app: str) -> None:
    persona = {"id": "inline", "system_prompt": "You remember.", "model_profile_id": "local"}
    agent_id = api.post("/v1/agents", json={"name": "r", "persona": persona}).json()["id"]
    base = f"/v1/agents/{agent_id}/memories"
    fact = {"type": "fact", "subject": "user.team", "content": "The user is on the payments team"}
    fact_id = api.post(base, json=fact).json()["memory"]["id"]
    api.post(base, json={"content": "Lunch on Friday with Sam", "significance": 0.1})

    found = wonder.json("memories", "search", agent_id, "which team is the user on", "-k", "1")
    assert [m["id"] for m in found["items"]] == [fact_id] and 0 <= found["items"][0]["relevance"]
    table = wonder.ok("memories", "search", agent_id, "team", "--mode", "fts", "--type", "fact")
    assert table.splitlines()[0].split() == ["SCORE", "TYPE", "MEMORY", "SUBJECT", "CONTENT"]
    assert fact_id in table and "Lunch" not in table
    listed = wonder.json("memories", "list", agent_id, "--limit", "1")
    assert len(listed["items"]) == 1 and listed["next_cursor"]
    assert "NOT_FOUND" in wonder.fails(3, "memories", "search", "agent_nope", "x")


def test_projects_diff_and_merge_a_runs_branch(
    wonder: Wonder, api: httpx.Client, ray_cluster: Cluster
) -> None:
    project = wonder.json("projects", "create", "notes")
    assert project["default_branch"] == "main"
    assert project["id"] in wonder.ok("projects", "list")
    assert "name: notes" in wonder.ok("projects", "show", project["id"])
    task_id, workflow_id = unique("task-notes"), unique("wf-notes")
    task = {
        "actions": [
            {"kind": "repo.write", "params": {"path": "notes.md", "content": "# Notes\n"}},
            {"kind": "repo.commit", "params": {"message": "Add notes"}},
        ]
    }
    assert api.put(f"/v1/tasks/{task_id}", json=task).status_code == 200
    workflow = {"nodes": [{"id": "write", "kind": "task", "target_id": task_id}]}
    assert api.put(f"/v1/workflows/{workflow_id}", json=workflow).status_code == 200
    args = ("workflows", "run", workflow_id, "--project", project["id"], "--wait", "60")
    run_id = wonder.json(*args)["run"]["id"]
    try:
        diff = wonder.ok("projects", "diff", "--run", run_id)
        assert diff.startswith(f"wonder/run-{run_id} against ") and "+# Notes" in diff
        assert wonder.json("projects", "diff", "--run", run_id)["files"] == ["notes.md"]
        assert wonder.ok("projects", "merge", "--run", run_id).startswith("merged into main (")
        again = wonder.json("projects", "merge", "--run", run_id)
        assert again["status"] == "up_to_date"
    finally:
        wiring.workspaces(ray_cluster.env).stop(run_id)
    conv = api.post("/v1/conversations", json={}).json()["id"]
    assert "no project branch" in wonder.fails(1, "projects", "diff", "--conversation", conv)
    assert "NOT_FOUND" in wonder.fails(3, "projects", "show", "proj_nope")


def test_library_reads(wonder: Wonder, api: httpx.Client) -> None:
    task_id = unique("task-read")
    task = {"actions": [{"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}]}
    assert api.put(f"/v1/tasks/{task_id}", json=task).status_code == 200
    assert api.put(f"/v1/tasks/{task_id}", json={**task, "description": "v2"}).status_code == 200
    listed = wonder.json("library", "list", "tasks")
    assert task_id in [t["id"] for t in listed["items"]]
    assert listed == api.get("/v1/tasks").json()
    assert task_id in wonder.ok("library", "list", "task")
    got = wonder.json("library", "get", "tasks", task_id)
    assert (got["version"], got["owner"]) == (2, api.get(f"/v1/tasks/{task_id}").json()["owner"])
    assert wonder.json("library", "get", "tasks", task_id, "--version", "1")["version"] == 1
    assert f"id: {task_id}" in wonder.ok("library", "get", "tasks", task_id)
    assert "NOT_FOUND" in wonder.fails(3, "library", "get", "personas", "no-such-persona")
    assert "NOT_FOUND" in wonder.fails(3, "library", "get", "tasks", task_id, "--system")


def test_doctor_sees_the_gateway_and_serves_apps(
    wonder: Wonder, gateway_url: str, ray_cluster: Cluster
) -> None:
    """The running half of ``wonder doctor`` against a real gateway and a real Ray dashboard
    (this session's head stands in for one ``wonder up`` started)."""
    port = gateway_url.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "doctor", "--json"],
        env={**wonder.env(), "WONDER_GATEWAY_PORT": port},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(result.stdout)
    found = {f["name"]: f for f in report["findings"]}
    assert found["gateway"]["state"] == "ok" and gateway_url in found["gateway"]["detail"]
    assert found["gateway port"]["detail"] == f"{port} serves Wonder"

    dashboard_port = int(ray_cluster.dashboard_url.rsplit(":", 1)[1])
    head = bootstrap.HeadInfo(
        pid=os.getpid(),
        address="127.0.0.1:0",
        gcs_port=0,
        dashboard_port=dashboard_port,
        temp_dir=str(ray_cluster.data_dir),
        log_file=str(ray_cluster.data_dir / "ray-head.log"),
        started_at=0.0,
    )
    apps = {f.name: f for f in doctor.app_findings(head, ["gateway", "never-deployed"])}
    assert (apps["app gateway"].state, apps["app gateway"].detail) == ("ok", "RUNNING")
    assert apps["app never-deployed"].state == "problem"
    assert apps["app never-deployed"].fix == "`wonder up` (it redeploys)"
