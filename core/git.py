"""Git as Wonder uses it: plain ``git`` subprocesses on a repository path (no Ray, no store).

A project's repository is a local git directory (bare or not). Conversations work on branches
(``wonder/conv-<id>``), workflow runs on ``wonder/run-<id>``, each checked out in one worktree;
merging into the default branch happens without a working tree (``git merge-tree --write-tree`` +
``commit-tree`` + a compare-and-swap ``update-ref``), so a merge never touches anyone's checkout and
a conflict changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from core.errors import Conflict, InvalidInput, NonRetryableError, NotFound, Unavailable

WONDER_IDENTITY = {
    "GIT_AUTHOR_NAME": "Wonder",
    "GIT_AUTHOR_EMAIL": "wonder@localhost",
    "GIT_COMMITTER_NAME": "Wonder",
    "GIT_COMMITTER_EMAIL": "wonder@localhost",
}
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
BRANCH_PREFIX = "wonder/conv-"
RUN_BRANCH_PREFIX = "wonder/run-"
GIT_TIMEOUT_S = 120.0
PUSH_TIMEOUT_S = 60.0


class GitError(NonRetryableError):
    """A git command failed (its stderr is the message)."""


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: this process's, no prompts, Wonder's identity as default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", **WONDER_IDENTITY, **(extra or {})})
    return env


def run_git(
    cwd: Path,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``git -C cwd ARGS``; a non-zero exit raises ``GitError`` unless ``check`` is false."""
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=git_env(env),
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise Unavailable(f"git {args[0]} took longer than {timeout_s:.0f}s") from None
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[:2000]
        raise GitError(f"git {args[0]} failed: {detail}")
    return done


def conversation_branch(conversation_id: str) -> str:
    """The working branch of a conversation (seed 001: ``wonder/conv-<conversation_id>``)."""
    return f"{BRANCH_PREFIX}{conversation_id}"


REPOSITORY_PATTERN = r"^(/|[A-Za-z][A-Za-z0-9+.-]*://|[^@/ ]+@[^:/ ]+:)"
"""Where a project's repository may be: an absolute local path, or a remote (``scheme://...`` or
scp-like ``user@host:path``)."""


def run_branch(run_id: str) -> str:
    """The working branch of a workflow run that touches a project: ``wonder/run-<run_id>``."""
    return f"{RUN_BRANCH_PREFIX}{run_id}"


def branch_owner(branch: str) -> str:
    """The conversation or run id a Wonder branch belongs to: its workspace's key.

    A branch has one checkout, kept by its owner's workspace; whoever else works on the branch (a
    delegated child, a workflow's agent node) works in that same workspace.
    """
    for prefix in (BRANCH_PREFIX, RUN_BRANCH_PREFIX):
        if branch.startswith(prefix) and len(branch) > len(prefix):
            return branch[len(prefix) :]
    raise InvalidInput(f"{branch} is not a Wonder working branch")


def looks_like_url(location: str) -> bool:
    """A remote location (``scheme://...`` or scp-like ``user@host:path``), not a local path."""
    return "://" in location or ("@" in location and ":" in location.split("/", 1)[0])


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What an explicit merge did: ``merged`` (a new commit), ``up_to_date``, or ``conflicts``."""

    status: str
    commit: str | None = None
    conflicts: tuple[str, ...] = ()
    message: str = ""


@dataclass(frozen=True, slots=True)
class BranchDiff:
    base: str
    head: str
    files: tuple[str, ...]
    diff: str
    truncated: bool


class GitRepository:
    """One repository on disk (bare or with a working tree)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    # ------------------------------------------------------------------ creating and opening

    @classmethod
    def init_bare(cls, path: Path, default_branch: str) -> GitRepository:
        """A new bare repository whose ``default_branch`` holds one empty initial commit."""
        path.mkdir(parents=True, exist_ok=True)
        run_git(path, "init", "--bare", "--quiet", f"--initial-branch={default_branch}")
        repo = cls(path)
        commit = repo.git("commit-tree", EMPTY_TREE, "-m", "Initial commit").strip()
        repo.git("update-ref", f"refs/heads/{default_branch}", commit)
        return repo

    @classmethod
    def clone_bare(cls, url: str, path: Path) -> GitRepository:
        """A bare clone of ``url`` (its branches become local branches)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        run_git(path.parent, "clone", "--bare", "--quiet", url, str(path))
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> GitRepository:
        """An existing local repository; ``NotFound`` when there is none at ``path``."""
        if not path.is_absolute():
            raise InvalidInput(f"repository path must be absolute: {path}")
        if not path.is_dir():
            raise NotFound(f"repository {path} does not exist")
        found = run_git(path, "rev-parse", "--absolute-git-dir", check=False)
        if found.returncode != 0:
            raise NotFound(f"{path} is not a git repository")
        return cls(path)

    def git(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return run_git(self.path, *args, stdin=stdin, check=check).stdout

    # ------------------------------------------------------------------ refs

    def head_branch(self) -> str | None:
        """The branch HEAD names (a bare repository's default), or None when detached."""
        done = run_git(self.path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return done.stdout.strip() or None

    def resolve(self, rev: str) -> str | None:
        done = run_git(
            self.path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False
        )
        return done.stdout.strip() or None

    def has_branch(self, branch: str) -> bool:
        return self.resolve(f"refs/heads/{branch}") is not None

    def require_branch(self, branch: str) -> str:
        commit = self.resolve(f"refs/heads/{branch}")
        if commit is None:
            raise NotFound(f"branch {branch} not found in {self.path}")
        return commit

    def create_branch(self, branch: str, start: str) -> str:
        """Create ``branch`` at ``start`` (idempotent when it already exists); its commit."""
        existing = self.resolve(f"refs/heads/{branch}")
        if existing is not None:
            return existing
        start_commit = self.require_branch(start)
        self.git("branch", branch, start_commit)
        return start_commit

    def delete_branch_if_merged(self, branch: str, into: str) -> bool:
        """Delete ``branch`` when ``into`` holds all of it (nothing is lost); True if deleted."""
        head = self.resolve(f"refs/heads/{branch}")
        if head is None:
            return False
        target = self.require_branch(into)
        merged = run_git(self.path, "merge-base", "--is-ancestor", head, target, check=False)
        if merged.returncode != 0:
            return False
        # Compare-and-swap: a commit that lands meanwhile keeps the branch.
        gone = run_git(self.path, "update-ref", "-d", f"refs/heads/{branch}", head, check=False)
        return gone.returncode == 0

    def push(self, branch: str, remote: str = "origin") -> str:
        """Push ``branch`` to ``remote`` (fast-forward only); the commit pushed.

        Raises:
            Conflict: the remote refused (it has commits this repository lacks).
            Unavailable: the remote could not be reached or refused us (auth, network).
        """
        commit = self.require_branch(branch)
        refspec = f"refs/heads/{branch}:refs/heads/{branch}"
        done = run_git(
            self.path, "push", "--porcelain", remote, refspec, check=False, timeout_s=PUSH_TIMEOUT_S
        )
        if done.returncode == 0:
            return commit
        detail = (done.stderr + done.stdout).strip()[:2000]
        if "[rejected]" in detail or "non-fast-forward" in detail or "fetch first" in detail:
            raise Conflict(
                f"{remote} refused {branch}: it has commits this project lacks ({detail})"
            )
        raise Unavailable(f"pushing {branch} to {remote} failed: {detail}")

    def branches(self, prefix: str = "") -> list[str]:
        out = self.git("for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}")
        return [line for line in out.splitlines() if line]

    def log(self, rev: str, limit: int = 10) -> list[dict[str, str]]:
        """The newest ``limit`` commits of ``rev``: ``{commit, subject, author, date}``."""
        out = self.git("log", f"-n{limit}", "--format=%H%x1f%s%x1f%an%x1f%cI", rev, "--")
        entries = []
        for line in out.splitlines():
            commit, subject, author, date = line.split("\x1f")
            entries.append({"commit": commit, "subject": subject, "author": author, "date": date})
        return entries

    # ------------------------------------------------------------------ comparing and merging

    def ahead_behind(self, base: str, head: str) -> tuple[int, int]:
        """Commits ``head`` has that ``base`` lacks, and the other way round."""
        out = self.git("rev-list", "--left-right", "--count", f"{head}...{base}", "--")
        ahead, behind = out.split()
        return int(ahead), int(behind)

    def branch_diff(self, base: str, head: str, max_bytes: int = 200_000) -> BranchDiff:
        """What ``head`` changed since it left ``base`` (``git diff base...head``)."""
        self.require_branch(base)
        self.require_branch(head)
        names = self.git("diff", "--name-only", f"{base}...{head}", "--")
        text = self.git("diff", f"{base}...{head}", "--")
        data = text.encode()
        truncated = len(data) > max_bytes
        if truncated:
            text = data[:max_bytes].decode(errors="ignore")
        files = tuple(line for line in names.splitlines() if line)
        return BranchDiff(base=base, head=head, files=files, diff=text, truncated=truncated)

    def merge(self, branch: str, into: str, message: str | None = None) -> MergeOutcome:
        """Merge ``branch`` into ``into`` without a working tree; a conflict changes nothing.

        ``into`` moves by compare-and-swap: if someone moved it meanwhile, ``Conflict`` is
        raised and the caller may try again.
        """
        head = self.require_branch(branch)
        target = self.require_branch(into)
        self._refuse_checked_out(into)
        if (
            run_git(self.path, "merge-base", "--is-ancestor", head, target, check=False).returncode
            == 0
        ):
            return MergeOutcome(status="up_to_date", commit=target)
        done = run_git(
            self.path, "merge-tree", "--write-tree", "--name-only", target, head, check=False
        )
        if done.returncode == 1:
            files, _, notes = done.stdout.partition("\n\n")
            conflicted = tuple(dict.fromkeys(files.splitlines()[1:]))
            return MergeOutcome(status="conflicts", conflicts=conflicted, message=notes.strip())
        if done.returncode != 0:
            raise GitError(f"git merge-tree failed: {done.stderr.strip()[:2000]}")
        tree = done.stdout.splitlines()[0].strip()
        text = message or f"Merge branch '{branch}' into {into}"
        commit = self.git("commit-tree", tree, "-p", target, "-p", head, "-m", text).strip()
        moved = run_git(self.path, "update-ref", f"refs/heads/{into}", commit, target, check=False)
        if moved.returncode != 0:
            raise Conflict(f"{into} moved while merging {branch}; try again")
        return MergeOutcome(status="merged", commit=commit)

    def _refuse_checked_out(self, branch: str) -> None:
        """Moving a branch someone has checked out would leave their working tree stale."""
        listing = self.git("worktree", "list", "--porcelain")
        for block in listing.split("\n\n"):
            lines = block.splitlines()
            if f"branch refs/heads/{branch}" in lines and "bare" not in lines:
                where = lines[0].removeprefix("worktree ")
                raise Conflict(f"{branch} is checked out in {where}: merge there instead")

    # ------------------------------------------------------------------ worktrees

    def add_worktree(self, path: Path, branch: str) -> bool:
        """Check ``branch`` out at ``path``; an existing worktree there is kept. True if made.

        ``--force`` re-registers a worktree whose files are gone (its node was lost): the branch
        is then checked out afresh. Nothing is pruned: on a cluster whose worktrees live on
        node-local disks, a worktree missing here may be alive on another node.
        """
        if (path / ".git").exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        self.git("worktree", "add", "--force", "--quiet", str(path), branch)
        return True

    def remove_worktree(self, path: Path) -> None:
        """Remove the worktree at ``path``: its files and its registration."""
        run_git(self.path, "worktree", "remove", "--force", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)  # what git left (ignored files, a broken tree)

    def common_dir(self) -> Path:
        return Path(self.git("rev-parse", "--path-format=absolute", "--git-common-dir").strip())


class Worktree:
    """A checked-out working tree (a conversation's workspace)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str, check: bool = True) -> str:
        return run_git(self.path, *args, check=check).stdout

    def git_dir(self) -> Path:
        """This worktree's own git directory (index, HEAD) inside the repository."""
        return Path(self.git("rev-parse", "--path-format=absolute", "--git-dir").strip())

    def branch(self) -> str | None:
        return self.git("symbolic-ref", "--quiet", "--short", "HEAD", check=False).strip() or None

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def changed_files(self) -> list[str]:
        """Paths with uncommitted changes (tracked or untracked), as ``git status`` sees them."""
        out = self.git("status", "--porcelain=v1", "-z", "--untracked-files=all")
        return [entry[3:] for entry in out.split("\0") if len(entry) > 3]

    def diff(self, base: str | None = None, max_bytes: int = 200_000) -> tuple[str, bool]:
        """Uncommitted changes (untracked files included), or everything since ``base``."""
        self.git("add", "--intent-to-add", "--all")
        args = ["diff", base] if base else ["diff", "HEAD"]
        text = self.git(*args, "--")
        data = text.encode()
        if len(data) > max_bytes:
            return data[:max_bytes].decode(errors="ignore"), True
        return text, False

    def commit_all(self, message: str, author: str | None = None) -> str | None:
        """Commit every change in the tree; the new commit, or None when nothing changed."""
        self.git("add", "--all")
        if run_git(self.path, "diff", "--cached", "--quiet", check=False).returncode == 0:
            return None
        env = {"GIT_AUTHOR_NAME": author} if author else None
        run_git(self.path, "commit", "--quiet", "--no-verify", "-m", message, env=env)
        return self.head()

    def grep(
        self, pattern: str, path: str, max_hits: int
    ) -> tuple[list[tuple[str, int, str]], bool]:
        """``git grep`` over tracked and untracked files: ``(path, line, text)`` hits."""
        done = run_git(
            self.path,
            "grep",
            "-n",
            "-I",
            "--untracked",
            "--no-color",
            "-E",
            "-e",
            pattern,
            "--",
            path or ".",
            check=False,
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
