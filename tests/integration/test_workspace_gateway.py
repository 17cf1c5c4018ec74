"""End to end through the gateway (real HTTP, real Ray, a scripted model): an agent scoped to a
project edits a file with ``repo.write``, runs the project's tests with ``shell.exec``, commits, and
the diff shows over REST; then the branch is merged by an explicit call."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import wiring
from cluster.naming import existing_actor, workspace_actor_name
from core.git import GitRepository, run_git
from core.projects import workspaces_root
from core.worktree import Worktree
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client, unique

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = (
    "import unittest\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def api(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "coder")
    with http_client(gateway_url, key) as client:
        yield client


@pytest.fixture
def source_repo(tmp_path: Path) -> Path:
    """The user's repository: a calculator whose test fails."""
    run_git(tmp_path, "init", "--quiet", "--initial-branch=main")
    (tmp_path / "calc.py").write_text(BROKEN)
    (tmp_path / "test_calc.py").write_text(TESTS)
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    assert Worktree.checkout(tmp_path).commit_all("calculator") is not None
    return tmp_path


def put_task_tool(api: httpx.Client, name: str, kind: str, properties: dict[str, Any]) -> str:
    task_id, tool_id = unique(f"task-{name}"), unique(f"tool-{name}")
    task = {"actions": [{"kind": kind, "params": {}}]}
    assert api.put(f"/v1/tasks/{task_id}", json=task).status_code == 200
    tool = {
        "name": name,
        "description": f"{kind} in the conversation's workspace",
        "input_schema": {"type": "object", "properties": properties},
        "target_type": "task",
        "target_id": task_id,
    }
    assert api.put(f"/v1/tools/{tool_id}", json=tool).status_code == 200
    return tool_id


def test_an_agent_fixes_code_runs_tests_commits_and_the_diff_shows(
    api: httpx.Client, source_repo: Path, ray_cluster: Cluster
) -> None:
    started = api.post("/v1/projects", json={"name": "calc", "repository": f"file://{source_repo}"})
    assert started.status_code == 202, started.text  # cloned in the background: poll it

    def cloned() -> dict[str, Any] | None:
        found: dict[str, Any] = api.get(started.headers["Location"]).json()
        return found if found["status"] != "cloning" else None

    project = wait_for(cloned, timeout=120)
    assert project["status"] == "ready", project
    tools = [
        put_task_tool(api, "write_file", "repo.write", {"path": {}, "content": {}}),
        put_task_tool(api, "run", "shell.exec", {"command": {}, "timeout_s": {}}),
        put_task_tool(api, "commit", "repo.commit", {"message": {}}),
    ]
    script = [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "calc.py", "content": FIXED}}
            ]
        },
        {"tool_calls": [{"name": "run", "arguments": {"command": "python3 -m unittest -q 2>&1"}}]},
        {"tool_calls": [{"name": "commit", "arguments": {"message": "Fix add"}}]},
        {"reply": "Fixed add; tests pass."},
    ]
    profile_id, persona_id = unique("scripted"), unique("developer")
    profile = {"provider": "scripted", "model": "script", "script": script}
    assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
    persona = {"system_prompt": "You code.", "model_profile_id": profile_id, "tool_ids": tools}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    agent = api.post(
        "/v1/agents",
        json={"name": "dev", "persona_ref": {"id": persona_id}, "project_ids": [project["id"]]},
    ).json()
    conversation = api.post("/v1/conversations", json={"agent_id": agent["id"]}).json()
    conv = conversation["id"]
    assert conversation["branch"] == f"wonder/conv-{conv}"

    try:
        turn_id = api.post(f"/v1/conversations/{conv}/messages", json={"content": "fix add"})
        turn_id = turn_id.json()["turn_id"]

        def finished() -> dict[str, Any] | None:
            turn = api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json()
            return turn if turn["status"] != "active" else None

        turn = wait_for(finished, timeout=120, interval=0.2)
        assert turn["status"] == "completed", turn
        results = [move["tool_result"] for move in turn["moves"] if move["tool_result"]]
        assert [r["success"] for r in results] == [True, True, True], results
        ran = results[1]["result"]
        assert ran["exit_code"] == 0 and "OK" in ran["stdout"], ran

        diff = api.get(f"/v1/conversations/{conv}/diff").json()
        assert diff["files"] == ["calc.py"] and "+    return a + b" in diff["diff"]
        workspace = api.get(f"/v1/conversations/{conv}/workspace").json()
        assert workspace["branch"] == conversation["branch"] and workspace["changed_files"] == []
        merged = api.post(f"/v1/conversations/{conv}/merge").json()
        assert merged["status"] == "merged"
        shown = subprocess.run(
            ["git", "-C", project["repository"], "show", "main:calc.py"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shown.stdout == FIXED
        assert (source_repo / "calc.py").read_text() == BROKEN  # the user's clone is untouched

        # Deleting the conversation removes its workspace; its branch, merged, goes too.
        worktree = workspaces_root(ray_cluster.settings) / conv
        assert worktree.is_dir() and existing_actor(workspace_actor_name(conv)) is not None
        assert api.delete(f"/v1/conversations/{conv}").json()["deleted"] == [conv]
        assert not worktree.exists() and existing_actor(workspace_actor_name(conv)) is None
        assert not GitRepository(Path(project["repository"])).has_branch(conversation["branch"])
    finally:
        wiring.workspaces(ray_cluster.env).stop(conv)


def test_a_run_started_on_a_project_works_on_its_own_branch(
    api: httpx.Client, ray_cluster: Cluster
) -> None:
    project = api.post("/v1/projects", json={"name": "notes"}).json()
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

    unknown = api.post(f"/v1/workflows/{workflow_id}/runs", json={"project_id": "proj_nope"})
    assert unknown.status_code == 404 and "proj_nope" in unknown.json()["error"]["message"]
    started = api.post(
        f"/v1/workflows/{workflow_id}/runs", json={"project_id": project["id"], "wait_s": 60}
    )
    assert started.status_code == 202, started.text
    run = started.json()["run"]
    run_id = run["id"]
    try:
        assert run["status"] == "completed", run
        assert run["context"]["branch"] == f"wonder/run-{run_id}"
        branch = api.get(f"/v1/workflow-runs/{run_id}/branch").json()
        assert branch["run_id"] == run_id and (branch["ahead"], branch["behind"]) == (1, 0)
        assert [c["subject"] for c in branch["commits"]] == ["Add notes"]
        diff = api.get(f"/v1/workflow-runs/{run_id}/diff").json()
        assert diff["files"] == ["notes.md"] and "+# Notes" in diff["diff"]
        merged = api.post(f"/v1/workflow-runs/{run_id}/merge").json()
        assert merged["status"] == "merged" and not merged["pushed"]
    finally:
        wiring.workspaces(ray_cluster.env).stop(run_id)
