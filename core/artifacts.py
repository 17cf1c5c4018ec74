"""A project's artifacts repository: versioned documents (designs, decisions, research) in git.

Each project has a bare ``artifacts.git`` (``core.projects``). An artifact is a file on its
``main`` branch; every write is a commit, so every version stays readable. Writes need no working
tree: the blob goes into a temporary index built from ``main``, ``write-tree`` + ``commit-tree``
make the commit, and ``update-ref`` moves ``main`` only if nobody moved it meanwhile (two writers
retry, neither loses a version). Search goes through the memory machinery (``artifact.search``).
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from core.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from core.git import DIFF_SAFETY, EMPTY_TREE, GitRepository

ARTIFACTS_BRANCH = "main"
WRITE_ATTEMPTS = 30


def artifact_path(path: str) -> str:
    """A clean relative artifact path; absolute paths, ``..`` and ``.git`` are refused."""
    if not path or "\0" in path or len(path) > 500:
        raise InvalidInput("artifact path must be 1 to 500 characters")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or ".git" in pure.parts:
        raise PermissionDenied(f"artifact path {path!r} must stay inside the artifacts repository")
    return pure.as_posix()


@dataclass(frozen=True, slots=True)
class ArtifactVersion:
    path: str
    commit: str
    content: str


class ArtifactRepository:
    """Versioned artifacts of one project."""

    def __init__(self, path: Path) -> None:
        self.repo = GitRepository(path)

    def write(self, path: str, content: str, message: str, author: str | None = None) -> str:
        """Commit ``content`` at ``path`` on ``main``; the new commit."""
        clean = artifact_path(path)
        blob = self.repo.git("hash-object", "-w", "--stdin", stdin=content).strip()
        env = {"GIT_AUTHOR_NAME": author} if author else {}
        for attempt in range(WRITE_ATTEMPTS):
            if attempt:  # another writer moved main (or held its lock): back off, jittered
                time.sleep(random.uniform(0, 0.01 * min(attempt, 10)))
            parent = self.repo.resolve(f"refs/heads/{ARTIFACTS_BRANCH}")
            with tempfile.TemporaryDirectory(prefix="wonder-artifact-") as scratch:
                index_env = {**env, "GIT_INDEX_FILE": os.path.join(scratch, "index")}
                self.repo.run("read-tree", parent or EMPTY_TREE, env=index_env, check=True)
                self.repo.run(
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    f"100644,{blob},{clean}",
                    env=index_env,
                    check=True,
                )
                tree = self.repo.run("write-tree", env=index_env, check=True).stdout.strip()
            parents = ["-p", parent] if parent else []
            commit = self.repo.run(
                "commit-tree", tree, *parents, "-m", message, env=env, check=True
            ).stdout.strip()
            moved = self.repo.run(
                "update-ref", f"refs/heads/{ARTIFACTS_BRANCH}", commit, parent or ""
            )
            if moved.returncode == 0:
                return commit
        raise Conflict(f"artifact {clean}: the repository kept moving; try again")

    def read(self, path: str, version: str | None = None) -> ArtifactVersion:
        """The artifact at ``version`` (a commit from ``versions``), else its latest version."""
        clean = artifact_path(path)
        rev = version or ARTIFACTS_BRANCH
        commit = self.repo.resolve(rev)
        if commit is None:
            raise NotFound(f"artifact version {rev} not found")
        shown = self.repo.run("show", *DIFF_SAFETY, f"{commit}:{clean}")
        if shown.returncode != 0:
            raise NotFound(f"artifact {clean} not found at {rev}")
        last = self.versions(clean, limit=1, at=commit)
        return ArtifactVersion(path=clean, commit=last[0] if last else commit, content=shown.stdout)

    def versions(self, path: str, limit: int = 50, at: str | None = None) -> list[str]:
        """Commits that changed ``path``, newest first."""
        clean = artifact_path(path)
        rev = at or ARTIFACTS_BRANCH
        if self.repo.resolve(rev) is None:
            return []
        out = self.repo.git("log", f"-n{limit}", "--format=%H", rev, "--", clean)
        return out.split()

    def paths(self) -> list[str]:
        """Every artifact on ``main``."""
        if self.repo.resolve(ARTIFACTS_BRANCH) is None:
            return []
        out = self.repo.git("ls-tree", "-r", "--name-only", ARTIFACTS_BRANCH)
        return [line for line in out.splitlines() if line]
