"""A checked-out working tree and git on it, with the git directory the repository keeps for it.

Git runs with both the git directory and the work tree named (``core.git.git_invocation``): the
tree's own ``.git``, which a sandboxed command may have replaced, is never read.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from core.errors import InvalidInput, NotFound
from core.git import DIFF_SAFETY, GitRepository, run_git


class Worktree:
    """A checked-out working tree (a conversation's workspace), with the git directory the
    repository keeps for it: git runs with both named, never finding them from the tree."""

    def __init__(self, path: Path, git_dir: Path) -> None:
        self.path = path
        self.git_dir = git_dir

    @classmethod
    def registered(cls, repository: GitRepository, path: Path) -> Worktree:
        """The worktree of ``repository`` checked out at ``path`` (``NotFound`` when the
        repository registers none there)."""
        git_dir = repository.registered_worktree(path)
        if git_dir is None:
            raise NotFound(f"no worktree of this repository at {path}")
        return cls(path, git_dir)

    @classmethod
    def checkout(cls, path: Path) -> Worktree:
        """A repository's own working tree (``path/.git`` a directory): a user's checkout."""
        git_dir = path / ".git"
        if not git_dir.is_dir() or git_dir.is_symlink():
            raise NotFound(f"{path} is not a checkout with a .git directory")
        return cls(path, git_dir)

    def run(
        self, *args: str, check: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_git(
            self.path, *args, check=check, env=env, git_dir=self.git_dir, work_tree=self.path
        )

    def git(self, *args: str, check: bool = True) -> str:
        return self.run(*args, check=check).stdout

    def branch(self) -> str | None:
        return self.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip() or None

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def changed_files(self) -> list[str]:
        """Paths with uncommitted changes (tracked or untracked), as ``git status`` sees them."""
        out = self.git(
            "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all"
        )
        return [entry[3:] for entry in out.split("\0") if len(entry) > 3]

    def diff(self, base: str | None = None, max_bytes: int = 200_000) -> tuple[str, bool]:
        """Uncommitted changes (untracked files included), or everything since ``base``."""
        self.git("add", "--intent-to-add", "--all")
        text = self.git("diff", *DIFF_SAFETY, "--ignore-submodules=all", base or "HEAD", "--")
        data = text.encode()
        if len(data) > max_bytes:
            return data[:max_bytes].decode(errors="ignore"), True
        return text, False

    def changed_names(self, base: str | None = None) -> list[str]:
        """The files ``diff`` shows."""
        out = self.git(
            "diff", *DIFF_SAFETY, "--ignore-submodules=all", "--name-only", base or "HEAD", "--"
        )
        return out.split()

    def commit_all(self, message: str, author: str | None = None) -> str | None:
        """Commit every change in the tree; the new commit, or None when nothing changed."""
        self.git("add", "--all")
        if self.run("diff", "--cached", "--quiet", "--ignore-submodules=all").returncode == 0:
            return None
        env = {"GIT_AUTHOR_NAME": author} if author else None
        self.run("commit", "--quiet", "--no-verify", "-m", message, check=True, env=env)
        return self.head()

    def committed_files(self, rev: str = "HEAD") -> list[str]:
        """The files commit ``rev`` touched."""
        return self.git("show", *DIFF_SAFETY, "--name-only", "--format=", rev, "--").split()

    def grep(
        self, pattern: str, path: str, max_hits: int
    ) -> tuple[list[tuple[str, int, str]], bool]:
        """``git grep`` over tracked and untracked files: ``(path, line, text)`` hits."""
        done = self.run(
            "grep",
            "-n",
            "-I",
            "--untracked",
            "--no-color",
            "--no-textconv",
            "-E",
            "-e",
            pattern,
            "--",
            path or ".",
        )
        if done.returncode not in (0, 1):
            raise InvalidInput(f"search failed: {done.stderr.strip()[:500]}")
        hits: list[tuple[str, int, str]] = []
        for line in done.stdout.splitlines():
            name, _, rest = line.partition(":")
            number, _, text = rest.partition(":")
            if number.isdigit():
                hits.append((name, int(number), text[:500]))
            if len(hits) >= max_hits:
                return hits, True
        return hits, False
