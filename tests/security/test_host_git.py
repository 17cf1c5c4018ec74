"""The host never obeys a worktree: git configuration planted by a sandboxed command never runs.

Each vector is planted from inside a real bubblewrap sandbox (a real ``shell.exec`` task on the
executor, reaching the workspace actor on the session's Ray) and would ``touch`` a marker file on
the host if the platform's own git obeyed it. Then every host-side git path runs on that worktree:
the ``repo.*`` actions, and over real HTTP the gateway's workspace, branch, diff and merge routes.
The marker must never appear.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from cluster import wiring
from core.projects import create_project
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client
from tests.integration.test_workspaces import Session, new_agent, new_conversation

# A git repository of the command's own (with a commit, so that diffs have a base), set up to run
# a command touching the marker.
PLANTED_REPOSITORY = (
    "git init -q {where} && git -C {where} -c user.name=a -c user.email=a@b "
    "commit -q --allow-empty -m planted && git -C {where} config {key} '{command}'"
)


def replace_dotgit(key: str) -> Callable[[str], str]:
    """The worktree's ``.git`` becomes a repository whose configuration sets ``key``."""
    return lambda touch: (
        "rm -rf .git && " + PLANTED_REPOSITORY.format(where=".", key=key, command=touch)
    )


def hooks(touch: str) -> str:
    hook = f"#!/bin/sh\n{touch}\n"
    names = ("post-commit", "pre-commit", "post-index-change", "reference-transaction")
    writes = " && ".join(
        f"printf '{hook}' > .git/hooks/{name} && chmod +x .git/hooks/{name}" for name in names
    )
    plant = PLANTED_REPOSITORY.format(where=".", key="core.bare", command="false")
    return f"rm -rf .git && {plant} && mkdir -p .git/hooks && {writes}"


def dotgit_pointer(touch: str) -> str:
    """``.git`` stays a file but points at a repository of the command's own."""
    plant = PLANTED_REPOSITORY.format(where="evil", key="core.fsmonitor", command=touch)
    return f'{plant} && echo "gitdir: $PWD/evil/.git" > .git'


def worktree_gitdir(touch: str) -> str:
    """The worktree's git directory (in the repository) redirected to a repository of its own:
    its ``commondir`` pointer, then a worktree configuration beside it."""
    plant = PLANTED_REPOSITORY.format(where="evil", key="core.fsmonitor", command=touch)
    gitdir = "$(sed -n 's/^gitdir: //p' .git)"
    return (
        f'{plant}; echo "$PWD/evil/.git" > {gitdir}/commondir; '
        f"printf '[core]\\n\\tfsmonitor = {touch}\\n' > {gitdir}/config.worktree; "
        f"cat {gitdir}/commondir"
    )


def embedded_repository(touch: str) -> str:
    """A repository inside the worktree (git treats it as a submodule): its own fsmonitor, and a
    clean filter on its files."""
    plant = PLANTED_REPOSITORY.format(where="sub", key="core.fsmonitor", command=touch)
    return (
        f"{plant} && git -C sub config filter.evil.clean '{touch}; cat' && "
        "echo '* filter=evil' > sub/.gitattributes && echo x > sub/file && "
        "git -C sub -c core.fsmonitor=false add -A && "
        "git -C sub -c core.fsmonitor=false -c user.name=a -c user.email=a@b commit -qm x"
    )


def filters(touch: str) -> str:
    plant = replace_dotgit("filter.evil.clean")(f"{touch}; cat")
    return (
        f"{plant} && git config filter.evil.smudge '{touch}; cat' && "
        "git config filter.evil.process 'sh -c \"" + touch + "\"' && "
        "echo '* filter=evil' > .gitattributes && echo data > data.txt"
    )


def external_diff(touch: str) -> str:
    return replace_dotgit("diff.external")(touch) + " && echo data > data.txt"


def textconv(touch: str) -> str:
    plant = replace_dotgit("diff.evil.textconv")(f"{touch}; cat")
    return f"{plant} && echo '* diff=evil' > .gitattributes && echo data > data.txt"


def include(touch: str) -> str:
    return (
        f"printf '[core]\\n\\tfsmonitor = {touch}\\n\\thooksPath = hooks\\n' > evil.cfg && "
        "rm -rf .git && "
        + PLANTED_REPOSITORY.format(where=".", key="include.path", command="../evil.cfg")
        + " && "
        f"mkdir -p hooks && printf '#!/bin/sh\\n{touch}\\n' > hooks/post-commit && "
        "chmod +x hooks/post-commit"
    )


VECTORS: dict[str, Callable[[str], str]] = {
    "fsmonitor": replace_dotgit("core.fsmonitor"),
    "hooks": hooks,
    "hooks_path": lambda touch: (
        replace_dotgit("core.hooksPath")("hooks")
        + f" && mkdir -p hooks && printf '#!/bin/sh\\n{touch}\\n' > hooks/post-commit"
        " && chmod +x hooks/post-commit"
    ),
    "dotgit_pointer": dotgit_pointer,
    "worktree_gitdir": worktree_gitdir,
    "embedded_repository": embedded_repository,
    "filters": filters,
    "external_diff": external_diff,
    "textconv": textconv,
    "include": include,
}


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def workplace(
    ray_cluster: Cluster, gateway_url: str
) -> Iterator[tuple[Session, httpx.Client, str]]:
    """A conversation on a new project's branch, and its client's API over HTTP."""
    store = ray_cluster.store
    client_id, key = make_client(store, "planted")
    project = create_project(store, ray_cluster.settings, client_id=client_id, name="planted")
    agent = new_agent(store, client_id, [project.id])
    session = Session(ray_cluster, new_conversation(store, agent, project.id), agent.id)
    with http_client(gateway_url, key) as api:
        yield session, api, session.conversation.id
    wiring.workspaces(ray_cluster.env).stop(session.conversation.id)


def host_git_paths(
    session: Session, api: httpx.Client, conversation_id: str
) -> Iterator[tuple[str, bool]]:
    """Every way the platform runs git on (or beside) a worktree; yields each one's name after it
    ran, and whether it answered as it should."""
    base = f"/v1/conversations/{conversation_id}"
    yield "repo.write", session.run("repo.write", path="notes.txt", content="notes\n").success
    yield "repo.tree", session.run("repo.tree").success
    yield "repo.search", session.run("repo.search", pattern="data|notes").success
    yield "repo.diff", session.run("repo.diff").success
    yield "repo.diff (branch)", session.run("repo.diff", against="default_branch").success
    yield "GET workspace", api.get(f"{base}/workspace").status_code == 200
    yield "repo.commit", session.run("repo.commit", message="planted").success
    yield "repo.index", session.run("repo.index").success
    yield "GET workspace (committed)", api.get(f"{base}/workspace").status_code == 200
    yield "GET branch", api.get(f"{base}/branch").status_code == 200
    yield "GET diff", api.get(f"{base}/diff").status_code == 200
    yield "POST merge", api.post(f"{base}/merge").status_code == 200


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_git_configuration_planted_in_a_sandbox_never_runs_on_the_host(
    vector: str, workplace: tuple[Session, httpx.Client, str], tmp_path: Path
) -> None:
    session, api, conversation_id = workplace
    marker = tmp_path / f"ran-on-host-{vector}"
    planted = session.sh(VECTORS[vector](f"touch {marker}"))
    assert not marker.exists(), planted  # the sandbox cannot reach the host's file itself
    failed: list[str] = []
    for name, answered in host_git_paths(session, api, conversation_id):
        assert not marker.exists(), f"{vector} ran on the host at {name}: {planted}"
        failed += [] if answered else [name]
    # And the platform kept working on that worktree, whatever the command left in it.
    assert failed == [], planted


def test_the_worktrees_git_directory_is_read_only_in_the_sandbox(
    workplace: tuple[Session, httpx.Client, str],
) -> None:
    """The index, HEAD and the pointer to the repository are git's, never a command's."""
    session, _, _ = workplace
    gitdir = "$(sed -n 's/^gitdir: //p' .git)"
    for target in ("commondir", "HEAD", "index", "config.worktree", "gitdir"):
        wrote = session.sh(f"echo planted > {gitdir}/{target}")
        assert wrote["exit_code"] != 0 and "Read-only" in wrote["stderr"], (target, wrote)
    # Git in the sandbox still reads the branch (status, log, diff work read-only).
    session.ok("repo.write", path="a.txt", content="a\n")
    seen = session.sh("git status --porcelain && git log --format=%s -n1")
    assert seen["exit_code"] == 0 and seen["stdout"] == "?? a.txt\nInitial commit\n", seen
