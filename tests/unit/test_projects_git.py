"""Projects and conversation branches on real git repositories (no Ray): ``core.git``,
``core.projects`` and the gateway's ``/v1/projects`` routes over a real store."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.git import GitRepository, Worktree, conversation_branch, run_git
from core.store import Store
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.unit.test_gateway_api import NoRuntime, RecordingConversations, add_client, error_of


def commit_file(worktree: Path, name: str, text: str, message: str) -> str:
    (worktree / name).write_text(text)
    commit = Worktree(worktree).commit_all(message)
    assert commit is not None
    return commit


@pytest.fixture
def repo(tmp_path: Path) -> GitRepository:
    return GitRepository.init_bare(tmp_path / "code.git", "main")


def test_a_new_bare_repository_has_its_default_branch(repo: GitRepository) -> None:
    assert repo.head_branch() == "main"
    assert repo.has_branch("main") and not repo.has_branch("dev")
    assert [entry["subject"] for entry in repo.log("main")] == ["Initial commit"]


def test_branches_worktrees_diff_and_merge(repo: GitRepository, tmp_path: Path) -> None:
    a, b = conversation_branch("conv_a"), conversation_branch("conv_b")
    assert a == "wonder/conv-conv_a"
    repo.create_branch(a, "main")
    repo.create_branch(b, "main")
    assert repo.create_branch(a, "main") == repo.require_branch(a)  # idempotent
    repo.add_worktree(tmp_path / "wa", a)
    repo.add_worktree(tmp_path / "wb", b)
    commit_file(tmp_path / "wa", "shared.txt", "from a\n", "a writes")
    commit_file(tmp_path / "wb", "shared.txt", "from b\n", "b writes")
    assert not (tmp_path / "wb" / "other.txt").exists()

    diff = repo.branch_diff("main", a)
    assert diff.files == ("shared.txt",) and "+from a" in diff.diff and not diff.truncated

    merged = repo.merge(a, "main")
    assert merged.status == "merged" and merged.commit == repo.require_branch("main")
    assert repo.merge(a, "main").status == "up_to_date"
    before = repo.require_branch("main")
    conflicted = repo.merge(b, "main")
    assert conflicted.status == "conflicts" and conflicted.conflicts == ("shared.txt",)
    assert repo.require_branch("main") == before  # a conflict changes nothing


def test_worktree_status_diff_commit_and_grep(repo: GitRepository, tmp_path: Path) -> None:
    repo.create_branch("work", "main")
    repo.add_worktree(tmp_path / "w", "work")
    tree = Worktree(tmp_path / "w")
    assert tree.branch() == "work" and tree.changed_files() == []
    (tmp_path / "w" / "app.py").write_text("def answer():\n    return 42\n")
    assert tree.changed_files() == ["app.py"]
    text, truncated = tree.diff()
    assert "+    return 42" in text and not truncated
    hits, more = tree.grep("return [0-9]+", "", 10)
    assert hits == [("app.py", 2, "    return 42")] and not more
    assert tree.commit_all("add app") is not None
    assert tree.commit_all("nothing") is None
    assert tree.changed_files() == []


def test_merge_refuses_a_checked_out_target(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    run_git(plain, "init", "--quiet", "--initial-branch=main")
    commit_file(plain, "a.txt", "a\n", "first")
    repo = GitRepository.open(plain)
    repo.create_branch("feature", "main")
    with pytest.raises(Exception, match="checked out"):
        repo.merge("feature", "main")


# --------------------------------------------------------------------------- REST


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


@pytest.fixture
def api(store: Store, tmp_path: Path) -> Iterator[TestClient]:
    context = GatewayContext(
        store=store,
        conversations=RecordingConversations(),
        workflows=NoRuntime(),
        memory=NoRuntime(),
        settings_env={"WONDER_DATA_DIR": str(tmp_path / "data")},
    )
    with TestClient(create_api(context), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {add_client(store, 'alice')}"
        yield client


PERSONA = {"system_prompt": "You code.", "model_profile_id": "local"}


def agent_for(api: TestClient, project_ids: list[str]) -> dict[str, Any]:
    created = api.post(
        "/v1/agents",
        json={"name": "dev", "persona": {"id": "dev", **PERSONA}, "project_ids": project_ids},
    )
    assert created.status_code == 201, created.text
    return dict(created.json())


def test_projects_crud_and_conversation_branches(
    api: TestClient, store: Store, tmp_path: Path
) -> None:
    created = api.post("/v1/projects", json={"name": "backend"})
    assert created.status_code == 201, created.text
    project = created.json()
    assert project["managed"] and project["default_branch"] == "main"
    assert Path(project["repository"]).is_dir() and Path(project["artifacts_repository"]).is_dir()
    assert [p["id"] for p in api.get("/v1/projects").json()["items"]] == [project["id"]]

    agent = agent_for(api, [project["id"]])
    conversation = api.post("/v1/conversations", json={"agent_id": agent["id"]}).json()
    assert conversation["project_id"] == project["id"]
    assert conversation["branch"] == f"wonder/conv-{conversation['id']}"
    repo = GitRepository(Path(project["repository"]))
    assert repo.require_branch(conversation["branch"]) == repo.require_branch("main")

    # An agent without projects gets no branch; a project must be one of the agent's.
    loose = agent_for(api, [])
    plain = api.post("/v1/conversations", json={"agent_id": loose["id"]}).json()
    assert plain["branch"] is None and plain["project_id"] is None
    denied = api.post(
        "/v1/conversations", json={"agent_id": loose["id"], "project_id": project["id"]}
    )
    assert denied.status_code == 403 and error_of(denied)["code"] == "PERMISSION_DENIED"

    busy = api.delete(f"/v1/projects/{project['id']}")
    assert busy.status_code == 409
    renamed = api.patch(f"/v1/projects/{project['id']}", json={"name": "api"})
    assert renamed.json()["name"] == "api"
    missing = api.patch(f"/v1/projects/{project['id']}", json={"default_branch": "nope"})
    assert missing.status_code == 404 and "nope" in error_of(missing)["message"]


def test_projects_from_a_path_or_a_url_and_scoping(
    api: TestClient, store: Store, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    run_git(source, "init", "--quiet", "--initial-branch=trunk")
    commit_file(source, "README", "hello\n", "first")
    in_place = api.post("/v1/projects", json={"name": "local", "repository": str(source)}).json()
    assert in_place["default_branch"] == "trunk" and not in_place["managed"]
    assert in_place["repository"] == str(source)
    cloned = api.post(
        "/v1/projects", json={"name": "clone", "repository": f"file://{source}"}
    ).json()
    assert cloned["managed"] and cloned["origin"] == f"file://{source}"
    assert GitRepository(Path(cloned["repository"])).has_branch("trunk")

    for body, status in (
        ({"name": "x", "repository": "relative/path"}, 422),  # the schema's pattern
        ({"name": "x", "repository": str(tmp_path / "absent")}, 404),
        ({"name": "x", "repository": f"file://{tmp_path / 'absent'}"}, 404),  # nothing to clone
        ({"name": "x", "repository": str(tmp_path / "data" / "projects")}, 403),
        ({"name": "x", "repository": str(source), "default_branch": "main"}, 404),
        ({"name": "x", "default_branch": "bad..name"}, 422),  # not a branch name
        ({"name": "x", "repository": str(source), "default_branch": "no/such"}, 404),
    ):
        response = api.post("/v1/projects", json=body)
        assert response.status_code == status, (body, response.text)

    bad_agent = api.post(
        "/v1/agents",
        json={"name": "a", "persona": {"id": "dev", **PERSONA}, "project_ids": ["proj_nope"]},
    )
    assert bad_agent.status_code == 404 and "proj_nope" in error_of(bad_agent)["message"]
    other = TestClient(api.app, raise_server_exceptions=False)
    other.headers["Authorization"] = f"Bearer {add_client(store, 'bob')}"
    assert other.get(f"/v1/projects/{in_place['id']}").status_code == 404
    assert api.delete(f"/v1/projects/{cloned['id']}").status_code == 204
    assert not Path(cloned["repository"]).exists()
    assert subprocess.run(["git", "-C", str(source), "status"], capture_output=True).returncode == 0


def test_branch_diff_and_merge_over_rest(api: TestClient, tmp_path: Path) -> None:
    project = api.post("/v1/projects", json={"name": "backend"}).json()
    agent = agent_for(api, [project["id"]])
    first, second = (
        api.post("/v1/conversations", json={"agent_id": agent["id"]}).json() for _ in range(2)
    )
    repo = GitRepository(Path(project["repository"]))
    for conversation, text in ((first, "one\n"), (second, "two\n")):
        tree = tmp_path / conversation["id"]
        repo.add_worktree(tree, conversation["branch"])
        commit_file(tree, "app.txt", text, f"write {text.strip()}")

    info = api.get(f"/v1/conversations/{first['id']}/branch").json()
    assert info["branch"] == first["branch"] and (info["ahead"], info["behind"]) == (1, 0)
    assert [c["subject"] for c in info["commits"]] == ["write one"]
    diff = api.get(f"/v1/conversations/{first['id']}/diff").json()
    assert diff["files"] == ["app.txt"] and "+one" in diff["diff"]

    merged = api.post(f"/v1/conversations/{first['id']}/merge", json={"message": "ship one"})
    assert merged.status_code == 200 and merged.json()["status"] == "merged", merged.text
    again = api.post(f"/v1/conversations/{first['id']}/merge")
    assert again.json()["status"] == "up_to_date"
    conflict = api.post(f"/v1/conversations/{second['id']}/merge")
    assert conflict.status_code == 409 and error_of(conflict)["code"] == "CONFLICT"
    assert conflict.json()["error"]["details"] == [{"path": "app.txt", "message": "merge conflict"}]
    assert api.get(f"/v1/conversations/{second['id']}/branch").json()["behind"] == 2

    plain = api.post("/v1/conversations", json={}).json()
    assert api.get(f"/v1/conversations/{plain['id']}/diff").status_code == 409
    assert api.get(f"/v1/conversations/{first['id']}/workspace").status_code == 503
