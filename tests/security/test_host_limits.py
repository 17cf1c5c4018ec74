"""``shell.exec`` and ``repo.*`` under abuse: a process flood, a disk filler, a full ``/tmp`` and
symlink races stay inside the command's own sandbox and worktree.

Everything runs as a tool call runs it: a task on the executor reaching the workspace actor on the
session's Ray, each command in a real bubblewrap sandbox.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cluster import wiring
from core.projects import create_project, workspaces_root
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_workspaces import Session, new_agent, new_conversation


def session_with(cluster: Cluster, env: dict[str, str] | None = None) -> Session:
    """A conversation on a new project's branch, its tool calls under ``env`` (the operator's)."""
    store = cluster.store
    client_id, _ = make_client(store, "abuse")
    project = create_project(store, cluster.settings, client_id=client_id, name="abuse")
    agent = new_agent(store, client_id, [project.id])
    return Session(cluster, new_conversation(store, agent, project.id), agent.id, env)


@pytest.fixture
def sessions(ray_cluster: Cluster) -> Iterator[list[Session]]:
    made: list[Session] = []
    yield made
    for session in made:
        wiring.workspaces(ray_cluster.env).stop(session.conversation.id)


def test_a_process_flood_stops_at_the_limit_and_harms_no_one_else(
    ray_cluster: Cluster, sessions: list[Session]
) -> None:
    """A tree of 1023 processes (a fork bomb that ends by itself) against a limit of 64: the
    command's forks fail, while a command of another workspace runs as usual meanwhile."""
    bomber = session_with(ray_cluster, {"WONDER_SHELL_MAX_PROCESSES": "64"})
    bystander = session_with(ray_cluster)
    sessions += [bomber, bystander]
    bomb = (
        "echo started > started.txt; "
        'bomb() { if [ "$1" -gt 0 ]; then bomb $(($1 - 1)) & bomb $(($1 - 1)); fi; sleep 6; }; '
        "bomb 9; echo survived"
    )
    tree = workspaces_root(ray_cluster.settings) / bomber.conversation.id
    with ThreadPoolExecutor(1) as pool:
        flooding = pool.submit(bomber.sh, bomb, 20)
        wait_for(lambda: (tree / "started.txt").exists(), timeout=60)
        calm = bystander.sh("echo alive && ls /proc | grep -c '^[0-9]'")
        flood = flooding.result()
    assert "Cannot fork" in flood["stderr"], flood
    assert flood["limits_hit"] == ["processes"], flood
    assert calm["exit_code"] == 0 and calm["stdout"].startswith("alive\n"), calm
    assert int(calm["stdout"].split()[1]) < 10  # it sees none of the flood's processes
    assert bomber.sh("echo fine")["stdout"] == "fine\n"  # the next command of its own is fine


def test_a_disk_filler_is_stopped_at_the_quota_and_held_back_after(
    ray_cluster: Cluster, sessions: list[Session]
) -> None:
    session = session_with(ray_cluster, {"WONDER_SHELL_DISK_MB": "16"})
    sessions.append(session)
    filler = (
        "i=0; while [ $i -lt 400 ]; do head -c 1048576 /dev/zero > fill.$i || break; "
        "i=$((i + 1)); done; echo wrote $i"
    )
    filled = session.sh(filler, timeout_s=120)
    assert filled["exit_code"] is None and not filled["timed_out"], filled
    assert "disk" in filled["limits_hit"] and "disk quota" in (filled["notice"] or ""), filled
    assert "wrote" not in filled["stdout"]  # stopped midway, not by its own end
    tree = workspaces_root(ray_cluster.settings) / session.conversation.id
    written = len(list(tree.glob("fill.*")))
    assert 16 <= written < 400

    # Over its quota, a command may remove and read, but nothing grows.
    held = session.sh("(echo more > more.txt); echo status $?; ls fill.* | wc -l")
    assert "disk" in held["limits_hit"] and "over its quota" in (held["notice"] or ""), held
    assert "status 0" not in held["stdout"] and not (tree / "more.txt").stat().st_size
    freed = session.sh("rm -f fill.* && echo freed")
    assert freed["stdout"] == "freed\n", freed
    again = session.sh("echo more > more.txt && cat more.txt")
    assert again["stdout"] == "more\n" and again["limits_hit"] == [], again


def test_tmp_is_small_and_private(ray_cluster: Cluster, sessions: list[Session]) -> None:
    session = session_with(ray_cluster, {"WONDER_SHELL_TMP_MB": "8"})
    sessions.append(session)
    full = session.sh("head -c 20971520 /dev/zero > /tmp/big; echo status $?; df -k /tmp | tail -1")
    assert "status 0" not in full["stdout"] and "No space left" in full["stderr"], full
    assert full["stdout"].split()[3] == str(8 * 1024), full  # df: the tmpfs's size, in KiB


SECRET = "the host's secret\n"
# Inside the sandbox: ``link`` (a file) and ``dir`` (a directory) are swapped, atomically and as
# fast as it goes (renameat2 RENAME_EXCHANGE), with symlinks to the host's secret and its
# directory, until the test drops a ``stop`` file in.
FLIPPER = """python3 - <<'EOF'
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), a)
os.makedirs("dir", exist_ok=True)
with open("dir/secret.txt", "w") as f:
    f.write("a decoy inside\\n")
with open("link", "w") as f:
    f.write("inside\\n")
os.symlink("{secret}", "link.alt")
os.symlink("{secret_dir}", "dir.alt")
flips = 0
while not os.path.exists("stop"):
    for name in ("link", "dir"):
        exchange(name, name + ".alt")
    flips += 1
    time.sleep(0.001)  # a flip per millisecond races well enough; a spin would spend its CPU limit
print("flips", flips)
EOF"""


def test_a_symlink_flipped_under_repo_read_and_write_never_leads_outside(
    ray_cluster: Cluster, sessions: list[Session], tmp_path: Path
) -> None:
    """A command swaps ``link`` (a file) and ``dir`` (a directory) between a target inside the
    worktree and one on the host, as fast as it can, while ``repo.read``, ``repo.tree`` and
    ``repo.write`` run on those paths: they see the inside or refuse, never the host's file."""
    session = session_with(ray_cluster)
    sessions.append(session)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    (tmp_path / "host-only.txt").write_text("a name only the host's directory has\n")
    flipper = FLIPPER.format(secret=secret, secret_dir=tmp_path)
    tree = workspaces_root(ray_cluster.settings) / session.conversation.id
    seen: list[Any] = []
    with ThreadPoolExecutor(1) as pool:
        flipping = pool.submit(session.sh, flipper, 300)
        wait_for(lambda: os.path.lexists(tree / "dir.alt"), timeout=60)
        for _ in range(10):
            for kind, params in (
                ("repo.read", {"path": "link"}),
                ("repo.read", {"path": "dir/secret.txt"}),
                ("repo.write", {"path": "dir/planted.txt", "content": "planted\n"}),
                ("repo.write", {"path": "link", "content": "overwritten\n"}),
                ("repo.tree", {"path": "dir"}),
            ):
                outcome = session.run(kind, **params)
                seen.append((kind, params, outcome.success, outcome.result, outcome.error))
        (tree / "stop").touch()
        flipped = flipping.result()
    assert flipped["stdout"].startswith("flips"), flipped
    leaked = [s for s in seen if "host's secret" in repr(s) or "host-only" in repr(s)]
    assert leaked == [], leaked[:3]
    assert secret.read_text() == SECRET  # never overwritten through the link
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host-only.txt", "secret.txt"]
    refused = [s for s in seen if not s[2]]
    assert all(s[4].code in ("PERMISSION_DENIED", "NOT_FOUND") for s in refused), refused[:3]
    assert len(refused) < len(seen)  # the inside was read too: the race was run both ways


def test_git_on_the_host_waits_for_the_worktree_to_be_quiet(
    ray_cluster: Cluster, sessions: list[Session]
) -> None:
    """``repo.commit`` reads the files it commits by path: it runs only when no command of the
    workspace runs (one could swap a file for a symlink to the host between git's look and its
    read). A commit asked for during a command commits what the command left."""
    session = session_with(ray_cluster)
    sessions.append(session)
    tree = workspaces_root(ray_cluster.settings) / session.conversation.id
    command = "echo started > started.txt; sleep 5; echo done > done.txt"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(session.sh, command, 60)
        wait_for(lambda: (tree / "started.txt").exists(), timeout=60)
        asked = time.monotonic()
        committed = session.ok("repo.commit", message="during a command")
        waited = time.monotonic() - asked
        finished = running.result()
    assert finished["exit_code"] == 0, finished
    assert committed["files"] == ["done.txt", "started.txt"], (committed, waited)
