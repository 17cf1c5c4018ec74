"""The artifacts repository (``core.artifacts``) on real bare git repositories: versions, paths,
concurrent writers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.artifacts import ArtifactRepository
from core.errors import NotFound, PermissionDenied
from core.git import GitRepository


@pytest.fixture
def artifacts(tmp_path: Path) -> ArtifactRepository:
    GitRepository.init_bare(tmp_path / "artifacts.git", "main")
    return ArtifactRepository(tmp_path / "artifacts.git")


def test_every_write_is_a_version(artifacts: ArtifactRepository) -> None:
    first = artifacts.write("design/auth.md", "# Auth\nUse sessions.\n", "auth v1")
    second = artifacts.write("design/auth.md", "# Auth\nUse JWT.\n", "auth v2", author="agent_x")
    artifacts.write("notes.md", "hello\n", "notes")
    assert artifacts.read("design/auth.md").content == "# Auth\nUse JWT.\n"
    assert artifacts.read("design/auth.md").commit == second
    assert artifacts.read("design/auth.md", first).content == "# Auth\nUse sessions.\n"
    assert artifacts.versions("design/auth.md") == [second, first]
    assert artifacts.paths() == ["design/auth.md", "notes.md"]
    author = artifacts.repo.git("log", "-n1", "--format=%an", second).strip()
    assert author == "agent_x"
    with pytest.raises(NotFound):
        artifacts.read("missing.md")
    for bad in ("/etc/passwd", "../x", "a/.git/config"):
        with pytest.raises(PermissionDenied):
            artifacts.write(bad, "x", "bad")


def test_concurrent_writers_lose_no_version(artifacts: ArtifactRepository) -> None:
    def write(n: int) -> str:
        return artifacts.write(f"doc-{n % 3}.md", f"version {n}\n", f"write {n}")

    with ThreadPoolExecutor(max_workers=6) as pool:
        commits = list(pool.map(write, range(18)))
    assert len(set(commits)) == 18
    history = artifacts.repo.git("log", "--format=%H", "main").split()
    assert set(commits) <= set(history)
    assert sum(len(artifacts.versions(f"doc-{i}.md")) for i in range(3)) == 18
