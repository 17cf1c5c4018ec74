"""Projects and conversation branches on real git repositories (no Ray): ``core.git``,
``core.projects`` and the gateway's ``/v1/projects`` routes over a real store."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.errors import InvalidInput
from core.git import (
    GitRepository,
    RemoteAccess,
    branch_owner,
    conversation_branch,
    run_branch,
    run_git,
)
from core.store import Store
from core.worktree import Worktree
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.conftest import wait_for
from tests.unit.test_gateway_api import NoRuntime, RecordingConversations, add_client, error_of

LOCAL = RemoteAccess(protocols=("file",))


def worktree_at(path: Path) -> Worktree:
    """The worktree at ``path`` as a test sees it: a checkout, or a linked worktree whose ``.git``
    file this (trusted) test reads."""
    if (path / ".git").is_dir():
        return Worktree.checkout(path)
    pointer = (path / ".git").read_text().removeprefix("gitdir:").strip()
    return Worktree(path, Path(pointer))


def commit_file(worktree: Path, name: str, text: str, message: str) -> str:
    (worktree / name).write_text(text)
    commit = worktree_at(worktree).commit_all(message)
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
    tree = Worktree.registered(repo, tmp_path / "w")
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
        settings_env={
            "WONDER_DATA_DIR": str(tmp_path / "data"),
            # The operator lets clients name repositories under this test's directory, and
            # clone over file://.
            "WONDER_PROJECT_PATH_ROOTS": json.dumps([str(tmp_path)]),
            "WONDER_PROJECT_URL_SCHEMES": '["file"]',
        },
    )
    with TestClient(create_api(context), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {add_client(store, 'alice')}"
        yield client


PERSONA = {"system_prompt": "You code.", "model_profile_id": "local"}


def cloned(api: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    """A project cloned from a URL: ``202`` at once, then ``ready`` (or ``failed``) when polled."""
    started = api.post("/v1/projects", json=body)
    assert started.status_code == 202, started.text
    assert started.json()["status"] == "cloning"
    location = started.headers["Location"]

    def settled() -> dict[str, Any] | None:
        project: dict[str, Any] = api.get(location).json()
        return project if project["status"] != "cloning" else None

    return wait_for(settled, timeout=60)


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
    clone = cloned(api, {"name": "clone", "repository": f"file://{source}"})
    assert clone["status"] == "ready" and clone["default_branch"] == "trunk", clone
    assert clone["managed"] and clone["origin"] == f"file://{source}"
    assert GitRepository(Path(clone["repository"])).has_branch("trunk")
    absent = cloned(api, {"name": "x", "repository": f"file://{tmp_path / 'absent'}"})
    assert absent["status"] == "failed" and "cannot clone" in absent["error"], absent
    assert str(tmp_path / "data") not in absent["error"]  # no path of Wonder's
    assert not (tmp_path / "data" / "projects" / absent["id"]).exists()

    for body, status in (
        ({"name": "x", "repository": "relative/path"}, 422),  # the schema's pattern
        ({"name": "x", "repository": str(tmp_path / "absent")}, 404),
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
    assert api.delete(f"/v1/projects/{clone['id']}").status_code == 204
    assert not Path(clone["repository"]).exists()
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


# --------------------------------------------------------------------------- branches' owners


def test_run_branches_and_branch_owners() -> None:
    assert run_branch("run_x") == "wonder/run-run_x"
    assert branch_owner(run_branch("run_x")) == "run_x"
    assert branch_owner(conversation_branch("conv_a")) == "conv_a"
    for foreign in ("main", "wonder/conv-", "feature/wonder/conv-x"):
        with pytest.raises(InvalidInput):
            branch_owner(foreign)


def test_a_branch_is_deleted_only_when_merged(repo: GitRepository, tmp_path: Path) -> None:
    repo.create_branch("untouched", "main")
    repo.create_branch("worked", "main")
    repo.add_worktree(tmp_path / "w", "worked")
    commit_file(tmp_path / "w", "a.txt", "a\n", "work")
    assert repo.delete_branch_if_merged("untouched", "main") and not repo.has_branch("untouched")
    assert not repo.delete_branch_if_merged("worked", "main") and repo.has_branch("worked")
    repo.remove_worktree(tmp_path / "w")
    assert repo.merge("worked", "main").status == "merged"
    assert repo.delete_branch_if_merged("worked", "main") and not repo.has_branch("worked")
    assert not repo.delete_branch_if_merged("worked", "main")  # already gone


def test_a_lost_worktree_is_checked_out_again_from_its_branch(
    repo: GitRepository, tmp_path: Path
) -> None:
    repo.create_branch("work", "main")
    tree = tmp_path / "w"
    assert repo.add_worktree(tree, "work")
    commit_file(tree, "kept.txt", "committed\n", "keep")
    (tree / "draft.txt").write_text("uncommitted\n")
    assert not repo.add_worktree(tree, "work")  # an existing worktree is kept as it is
    shutil.rmtree(tree)  # its node's disk is gone; the repository still registers it
    assert repo.add_worktree(tree, "work")
    assert (tree / "kept.txt").read_text() == "committed\n" and not (tree / "draft.txt").exists()
    repo.remove_worktree(tree)
    assert not tree.exists() and str(tree) not in repo.git("worktree", "list")
    assert repo.has_branch("work")  # removing a worktree keeps its branch


# --------------------------------------------------------------------------- pushing back


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A bare repository to clone from and push back to, with one commit on main."""
    seed = tmp_path / "seed"
    seed.mkdir()
    run_git(seed, "init", "--quiet", "--initial-branch=main")
    commit_file(seed, "README", "hello\n", "first")
    origin = tmp_path / "origin.git"
    run_git(tmp_path, "clone", "--bare", "--quiet", str(seed), str(origin), remote=LOCAL)
    return tmp_path / "origin.git"


def test_a_clone_pushes_its_default_branch_back(
    api: TestClient, origin: Path, tmp_path: Path
) -> None:
    project = cloned(
        api, {"name": "pushed", "repository": f"file://{origin}", "push_on_merge": True}
    )
    assert project["push_on_merge"] and project["status"] == "ready"
    agent = agent_for(api, [project["id"]])
    conversation = api.post("/v1/conversations", json={"agent_id": agent["id"]}).json()
    repo = GitRepository(Path(project["repository"]))
    tree = tmp_path / "work"
    repo.add_worktree(tree, conversation["branch"])
    commit_file(tree, "feature.txt", "new\n", "feature")

    merged = api.post(f"/v1/conversations/{conversation['id']}/merge").json()
    assert merged["status"] == "merged" and merged["pushed"] and merged["push_error"] is None
    assert GitRepository(origin).require_branch("main") == merged["commit"]
    pushed = api.post(f"/v1/projects/{project['id']}/push")
    assert pushed.status_code == 200 and pushed.json()["commit"] == merged["commit"]

    # Someone else pushes to the origin: the next push is refused (409), the merge stands.
    other = tmp_path / "other"
    run_git(tmp_path, "clone", "--quiet", str(origin), str(other), remote=LOCAL)
    commit_file(other, "theirs.txt", "theirs\n", "theirs")
    run_git(other, "push", "--quiet", "origin", "main", remote=LOCAL)
    commit_file(tree, "more.txt", "more\n", "more")
    again = api.post(f"/v1/conversations/{conversation['id']}/merge").json()
    assert again["status"] == "merged" and not again["pushed"]
    assert "refused" in again["push_error"] and repo.require_branch("main") == again["commit"]
    refused = api.post(f"/v1/projects/{project['id']}/push")
    assert refused.status_code == 409 and error_of(refused)["code"] == "CONFLICT"
    shutil.rmtree(origin)  # unreachable: 503, a retryable error that says what git said
    gone = api.post(f"/v1/projects/{project['id']}/push")
    assert gone.status_code == 503 and "origin" in error_of(gone)["message"]

    # Only a clone has an origin.
    local = api.post("/v1/projects", json={"name": "new"}).json()
    assert api.post(f"/v1/projects/{local['id']}/push").status_code == 409
    no_origin = api.patch(f"/v1/projects/{local['id']}", json={"push_on_merge": True})
    assert no_origin.status_code == 409 and "origin" in error_of(no_origin)["message"]
    assert api.patch(f"/v1/projects/{local['id']}", json={"push_on_merge": 1}).status_code == 422
    refused_at_creation = api.post("/v1/projects", json={"name": "x", "push_on_merge": True})
    assert refused_at_creation.status_code == 422  # a rule across fields of the body
    assert "origin" in error_of(refused_at_creation)["message"]
