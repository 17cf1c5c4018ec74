"""Git as Wonder uses it: plain ``git`` subprocesses on a repository path (no Ray, no store).

A project's repository is a local git directory (bare or not). Conversations work on branches
(``wonder/conv-<id>``), workflow runs on ``wonder/run-<id>``, each checked out in one worktree;
merging into the default branch happens without a working tree (``git merge-tree --write-tree`` +
``commit-tree`` + a compare-and-swap ``update-ref``), so a merge never touches anyone's checkout and
a conflict changes nothing.

Every git Wonder runs goes through ``run_git`` (``git_invocation`` builds its arguments and
environment): sandboxed commands write worktrees, so git on the host is never steered by what a
worktree holds (see the note above ``PINNED_CONFIG``). ``core.worktree`` runs git on a worktree.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
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


# ---------------------------------------------------------------------- how git runs on the host
#
# Git reads configuration, hooks, attributes and object locations from the repository it runs in,
# and several of those name commands. The platform runs git on worktrees that sandboxed commands
# write, so every git it runs goes through ``git_invocation``: the git directory and the work tree
# are named explicitly (a ``.git`` inside a worktree is never looked at), no system or global
# configuration is read, and every setting that could run a command or send git elsewhere is
# pinned on the command line (which wins over any file). What stays is the repository's own
# configuration file, which sandboxes can never write (it is mounted read-only in them);
# ``unsafe_config_keys`` refuses repositories whose file sets one of the keys git would obey.

PINNED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("http.followRedirects", "false"),
    ("transfer.fsckObjects", "true"),
    ("core.protectNTFS", "true"),
    ("core.protectHFS", "true"),
)
"""Settings every host-side git runs with (``-c`` wins over the repository's file, and git hands
them down to the git processes it starts, e.g. in an embedded repository)."""

SSH_COMMAND = (
    "ssh -F /dev/null -o BatchMode=yes -o IdentityAgent=none -o IdentitiesOnly=yes "
    "-o IdentityFile=/dev/null -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no "
    "-o ProxyCommand=none -o PermitLocalCommand=no -o UserKnownHostsFile=/dev/null "
    "-o StrictHostKeyChecking=yes"
)
"""ssh without the host's keys, agent, configuration or known hosts: a clone or push over ssh gets
no credentials of the host's user."""

PASSED_ENV = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "TMPDIR",
)
"""Variables of this process a git on the host still sees (the operator's proxies and CAs)."""

EXTRA_ENV = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
        "GIT_INDEX_FILE",
    }
)
"""Variables a caller may add: identity and a scratch index, nothing that locates or runs."""

DIFF_SAFETY = ("--no-ext-diff", "--no-textconv")
"""For every command that shows changes: no external diff program, no textconv filter."""

UNSAFE_KEYS = (
    r"include\.path",
    r"includeif\..*\.path",
    r"core\.(fsmonitor|hookspath|sshcommand|pager|editor|askpass|gitproxy|worktree)",
    r"core\.alternaterefscommand",
    r"filter\..*\.(clean|smudge|process)",
    r"diff\..*\.(command|textconv)",
    r"diff\.external",
    r"merge\..*\.driver",
    r"credential\.(.*\.)?helper",
    r"remote\..*\.(uploadpack|receivepack|vcs|proxy)",
    r"url\..*\.(insteadof|pushinsteadof)",
    r"http\.(.*\.)?proxy",
    r"gpg\.(.*\.)?program",
    r"sequence\.editor",
    r"uploadpack\.packobjectshook",
)
_UNSAFE = re.compile("|".join(f"(?:{key})" for key in UNSAFE_KEYS))


def unsafe_config_keys(names: list[str]) -> list[str]:
    """The keys among ``names`` (a repository's own configuration) that name a command, include
    another file or send git elsewhere: a repository setting one is not used."""
    return sorted({name for name in names if _UNSAFE.fullmatch(name.lower())})


@dataclass(frozen=True, slots=True)
class RemoteAccess:
    """What one clone or push may reach: the transports allowed (``https``, ``ssh``, ``file``...),
    and the credentials the operator gives (sent as an HTTP ``Authorization`` header, through the
    environment, never the command line). Without one, git reaches no remote at all."""

    protocols: tuple[str, ...]
    http_authorization: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class GitInvocation:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def _is_own_empty_dir(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        and not any(path.iterdir())
    )


@functools.cache
def _empty_home() -> str:
    """An empty, read-only directory of our own as git's ``HOME`` (no ``~/.gitconfig``,
    ``.netrc``, keys or caches): one per user, made once and kept (a fresh one when the shared
    name is taken by anything else)."""
    shared = Path(tempfile.gettempdir()) / f"wonder-git-home-{os.getuid()}"
    try:
        shared.mkdir(mode=0o500)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="wonder-git-home-")
    if _is_own_empty_dir(shared):
        return str(shared)
    return tempfile.mkdtemp(prefix="wonder-git-home-")


def _host_path() -> str:
    entries = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    return os.pathsep.join(entry for entry in entries if os.path.isabs(entry))


def git_invocation(
    args: tuple[str, ...] | list[str],
    *,
    cwd: Path,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    env: dict[str, str] | None = None,
    remote: RemoteAccess | None = None,
) -> GitInvocation:
    """The argument vector, environment and directory of one git the platform runs.

    ``git_dir`` (and ``work_tree`` for a checkout) name the repository; without ``git_dir``
    (``init``, ``clone``) git looks for no repository above ``cwd``. ``remote`` allows the
    transports of one clone or push; otherwise none is allowed.
    """
    extra = dict(env or {})
    if unknown := sorted(set(extra) - EXTRA_ENV):
        raise ValueError(f"git_invocation: variables {unknown} are not for callers to set")
    environment = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    environment.update(
        {
            "PATH": _host_path(),
            "HOME": _empty_home(),
            "LANG": "C",
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "",
            "GIT_PROXY_COMMAND": "",
            "GIT_SSH_COMMAND": SSH_COMMAND,
            "GIT_SSH_VARIANT": "ssh",
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_ALLOW_PROTOCOL": ":".join(remote.protocols) if remote else "",
            **WONDER_IDENTITY,
            **extra,
        }
    )
    if remote is not None and remote.http_authorization is not None:
        environment.update(
            {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: {remote.http_authorization}",
            }
        )
    argv = ["git"]
    if git_dir is None:
        environment["GIT_CEILING_DIRECTORIES"] = str(cwd.resolve().parent)
    else:
        argv.append(f"--git-dir={git_dir}")
        if work_tree is not None:
            argv.append(f"--work-tree={work_tree}")
    for key, value in PINNED_CONFIG:
        argv += ["-c", f"{key}={value}"]
    return GitInvocation(argv=[*argv, *args], env=environment, cwd=cwd)


def run_git(
    cwd: Path,
    *args: str,
    stdin: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    remote: RemoteAccess | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one git (``git_invocation``); a non-zero exit raises ``GitError`` unless ``check`` is
    false. Every git Wonder runs on the host runs here."""
    call = git_invocation(
        args, cwd=cwd, git_dir=git_dir, work_tree=work_tree, env=env, remote=remote
    )
    try:
        done = subprocess.run(
            call.argv,
            cwd=call.cwd,
            input=stdin,
            capture_output=True,
            text=True,
            env=call.env,
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


def repository_git_dir(path: Path) -> Path:
    """The git directory of the repository at ``path``: ``path`` itself when bare, else its
    ``.git`` directory (a ``.git`` file, a linked worktree's or a submodule's, is not followed)."""
    dot_git = path / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return dot_git
    return path


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


class GitRepository:
    """One repository on disk (bare or with a working tree); git runs on its git directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.git_dir = repository_git_dir(path)

    # ------------------------------------------------------------------ creating and opening

    @classmethod
    def init_bare(cls, path: Path, default_branch: str) -> GitRepository:
        """A new bare repository whose ``default_branch`` holds one empty initial commit."""
        path.mkdir(parents=True, exist_ok=True)
        branch = f"--initial-branch={default_branch}"
        run_git(path.parent, "init", "--bare", "--quiet", branch, str(path))
        repo = cls(path)
        commit = repo.git("commit-tree", EMPTY_TREE, "-m", "Initial commit").strip()
        repo.git("update-ref", f"refs/heads/{default_branch}", commit)
        return repo

    @classmethod
    def clone_bare(
        cls, url: str, path: Path, access: RemoteAccess, timeout_s: float = GIT_TIMEOUT_S
    ) -> GitRepository:
        """A bare clone of ``url`` (its branches become local branches), over ``access``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        run_git(
            path.parent,
            "clone",
            "--bare",
            "--quiet",
            "--",
            url,
            str(path),
            remote=access,
            timeout_s=timeout_s,
        )
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> GitRepository:
        """An existing local repository (bare, or a checkout with a ``.git`` directory) at
        exactly ``path``; ``NotFound`` when there is none."""
        if not path.is_absolute():
            raise InvalidInput(f"repository path must be absolute: {path}")
        if not path.is_dir():
            raise NotFound(f"repository {path} does not exist")
        repo = cls(path)
        if not _is_git_dir(repo.git_dir) or repo.run("rev-parse", "--git-dir").returncode != 0:
            raise NotFound(f"{path} is not a git repository")
        return repo

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = False,
        env: dict[str, str] | None = None,
        remote: RemoteAccess | None = None,
        timeout_s: float = GIT_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """One git on this repository's git directory (no work tree)."""
        return run_git(
            self.git_dir,
            *args,
            stdin=stdin,
            check=check,
            env=env,
            git_dir=self.git_dir,
            remote=remote,
            timeout_s=timeout_s,
        )

    def git(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return self.run(*args, stdin=stdin, check=check).stdout

    def config_names(self) -> list[str]:
        """The keys this repository's own configuration file sets (includes not followed)."""
        done = run_git(
            self.git_dir,
            "config",
            "--file",
            str(self.git_dir / "config"),
            "--no-includes",
            "--name-only",
            "--list",
            check=False,
        )
        return done.stdout.split()

    def has_alternates(self) -> bool:
        """Whether objects are read from other repositories too (``objects/info/alternates``)."""
        info = self.git_dir / "objects" / "info"
        return (info / "alternates").exists() or (info / "http-alternates").exists()

    # ------------------------------------------------------------------ refs

    def head_branch(self) -> str | None:
        """The branch HEAD names (a bare repository's default), or None when detached."""
        done = self.run("symbolic-ref", "--quiet", "--short", "HEAD")
        return done.stdout.strip() or None

    def resolve(self, rev: str) -> str | None:
        done = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        return done.stdout.strip() or None

    def has_branch(self, branch: str) -> bool:
        return self.resolve(f"refs/heads/{branch}") is not None

    def require_branch(self, branch: str) -> str:
        commit = self.resolve(f"refs/heads/{branch}")
        if commit is None:
            raise NotFound(f"branch {branch} not found in the repository")
        return commit

    def create_branch(self, branch: str, start: str) -> str:
        """Create ``branch`` at ``start`` (idempotent when it already exists); its commit."""
        existing = self.resolve(f"refs/heads/{branch}")
        if existing is not None:
            return existing
        start_commit = self.require_branch(start)
        self.git("branch", "--", branch, start_commit)
        return start_commit

    def delete_branch_if_merged(self, branch: str, into: str) -> bool:
        """Delete ``branch`` when ``into`` holds all of it (nothing is lost); True if deleted."""
        head = self.resolve(f"refs/heads/{branch}")
        if head is None:
            return False
        target = self.require_branch(into)
        if self.run("merge-base", "--is-ancestor", head, target).returncode != 0:
            return False
        # Compare-and-swap: a commit that lands meanwhile keeps the branch.
        return self.run("update-ref", "-d", f"refs/heads/{branch}", head).returncode == 0

    def push(self, branch: str, access: RemoteAccess, remote: str = "origin") -> str:
        """Push ``branch`` to ``remote`` (fast-forward only) over ``access``; the commit pushed.

        Raises:
            Conflict: the remote refused (it has commits this repository lacks).
            Unavailable: the remote could not be reached or refused us (auth, network).
        """
        commit = self.require_branch(branch)
        refspec = f"refs/heads/{branch}:refs/heads/{branch}"
        done = self.run(
            "push",
            "--porcelain",
            "--no-verify",
            remote,
            refspec,
            remote=access,
            timeout_s=PUSH_TIMEOUT_S,
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
        out = self.git(
            "log", "--no-mailmap", f"-n{limit}", "--format=%H%x1f%s%x1f%an%x1f%cI", rev, "--"
        )
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
        names = self.git("diff", *DIFF_SAFETY, "--name-only", f"{base}...{head}", "--")
        text = self.git("diff", *DIFF_SAFETY, f"{base}...{head}", "--")
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
        if self.run("merge-base", "--is-ancestor", head, target).returncode == 0:
            return MergeOutcome(status="up_to_date", commit=target)
        done = self.run("merge-tree", "--write-tree", "--name-only", target, head)
        if done.returncode == 1:
            files, _, notes = done.stdout.partition("\n\n")
            conflicted = tuple(dict.fromkeys(files.splitlines()[1:]))
            return MergeOutcome(status="conflicts", conflicts=conflicted, message=notes.strip())
        if done.returncode != 0:
            raise GitError(f"git merge-tree failed: {done.stderr.strip()[:2000]}")
        tree = done.stdout.splitlines()[0].strip()
        text = message or f"Merge branch '{branch}' into {into}"
        commit = self.git("commit-tree", tree, "-p", target, "-p", head, "-m", text).strip()
        if self.run("update-ref", f"refs/heads/{into}", commit, target).returncode != 0:
            raise Conflict(f"{into} moved while merging {branch}; try again")
        return MergeOutcome(status="merged", commit=commit)

    def _refuse_checked_out(self, branch: str) -> None:
        """Moving a branch someone has checked out would leave their working tree stale."""
        listing = self.git("worktree", "list", "--porcelain")
        for block in listing.split("\n\n"):
            lines = block.splitlines()
            if f"branch refs/heads/{branch}" in lines and "bare" not in lines:
                raise Conflict(f"{branch} is checked out in a working tree: merge there instead")

    # ------------------------------------------------------------------ worktrees

    def registered_worktree(self, path: Path) -> Path | None:
        """The git directory this repository keeps for its worktree at ``path``
        (``worktrees/<name>`` of its git directory), found from the repository's side: what
        ``path`` holds (its ``.git`` file, which a sandboxed command may rewrite) is never read."""
        expected = os.path.normpath(path.resolve() / ".git")
        registrations = self.git_dir / "worktrees"
        if not registrations.is_dir():
            return None
        for entry in sorted(registrations.iterdir()):
            try:
                pointer = (entry / "gitdir").read_text().strip()
            except OSError:
                continue
            if os.path.normpath(pointer) == expected and not entry.is_symlink():
                return entry
        return None

    def add_worktree(self, path: Path, branch: str) -> bool:
        """Check ``branch`` out at ``path``; an existing worktree there is kept. True if made.

        ``--force`` re-registers a worktree whose files are gone (its node was lost): the branch
        is then checked out afresh. Nothing is pruned: on a cluster whose worktrees live on
        node-local disks, a worktree missing here may be alive on another node.
        """
        if path.is_dir() and self.registered_worktree(path) is not None:
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        self.git("worktree", "add", "--force", "--quiet", "--", str(path), branch)
        return True

    def remove_worktree(self, path: Path) -> None:
        """Remove the worktree at ``path``: its files and its registration (by hand: ``git
        worktree remove`` would read the worktree's own ``.git``)."""
        registration = self.registered_worktree(path)
        shutil.rmtree(path, ignore_errors=True)
        if registration is not None:
            shutil.rmtree(registration, ignore_errors=True)

    def common_dir(self) -> Path:
        return self.git_dir.resolve()
