"""Cloning a project's repository: the slow part of creating a project from a URL.

``core.projects.create_project`` stores the project ``cloning``; ``complete_clone`` (which its
caller runs off the request path: the gateway has a few threads of its own for it) makes the bare
clone with no credentials of the host (``core.git.git_invocation``: no credential helpers, no ssh
agent or keys, an empty ``HOME``; only the URL's transport allowed), within
``WONDER_PROJECT_CLONE_TIMEOUT_S``, and stores the project ``ready`` or ``failed`` with an error
that names no path of the host. A host the operator allows only by ``*`` must resolve to public
addresses.

A private repository is cloned with the project's own credentials (a secret of its client, read
now, sent as an ``Authorization`` header where the operator allows: ``core.project_credentials``);
the error of a failed clone never holds the secret, even when the server repeats it.
"""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path

from core.domain import Project
from core.errors import NotFound, PermissionDenied, WonderError
from core.git import GitRepository
from core.project_credentials import origin_access
from core.project_sources import address_problem, needs_public_address, sources_for
from core.projects import (
    ARTIFACTS_REPOSITORY,
    CODE_REPOSITORY,
    check_repository_config,
    projects_root,
    remote_source,
)
from core.settings import Settings
from core.store import Store

log = logging.getLogger("wonder.projects")


def redact(text: str, paths: list[Path]) -> str:
    """``text`` with each of ``paths`` (and what they resolve to) replaced by ``…``."""
    for path in paths:
        for spelling in {str(path), str(path.resolve())}:
            if len(spelling) > 1:
                text = text.replace(spelling, "…")
    return text


def _resolved_addresses(host: str) -> list[str]:
    try:
        return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except OSError:
        raise NotFound(f"repository: host {host} does not resolve") from None


def _clone(store: Store, settings: Settings, project: Project, home: Path) -> GitRepository:
    origin = project.origin or ""
    source = remote_source(settings, project.client_id, origin)  # the policy may have changed
    sources = sources_for(settings, project.client_id)
    if needs_public_address(sources, source):
        problem = address_problem(source.host, _resolved_addresses(source.host))
        if problem is not None:
            raise PermissionDenied(f"repository: {problem}")
    remote = origin_access(store, settings, project, sources, source)
    try:
        repo = GitRepository.clone_bare(
            origin,
            home / CODE_REPOSITORY,
            remote.access,
            timeout_s=settings.project_clone_timeout_s,
        )
    except WonderError as exc:
        raise remote.scrubbed(exc) from None
    check_repository_config(repo, origin)
    return repo


def _cloned(store: Store, settings: Settings, project: Project, default_branch: str | None) -> str:
    """Clone into the project's home; the default branch it ends up with."""
    home = projects_root(settings) / project.id
    repo = _clone(store, settings, project, home)
    branch = default_branch or repo.head_branch() or "main"
    if not repo.has_branch(branch):
        raise NotFound(f"default_branch: {branch} does not exist in the repository")
    # Worktrees on other nodes' disks look missing from here: git gc must never prune them.
    repo.git("config", "gc.worktreePruneExpire", "never")
    GitRepository.init_bare(home / ARTIFACTS_REPOSITORY, "main")
    return branch


def complete_clone(
    store: Store, settings: Settings, project_id: str, default_branch: str | None
) -> Project | None:
    """Clone a ``cloning`` project's origin; the project as stored after (None: it was deleted
    meanwhile, and what the clone made is removed)."""
    project = store.projects.get(project_id)
    home = projects_root(settings) / project_id
    try:
        branch = _cloned(store, settings, project, default_branch)
        changes: dict[str, object] = {"status": "ready", "default_branch": branch}
    except WonderError as exc:
        shutil.rmtree(home, ignore_errors=True)
        message = redact(exc.message, [settings.data_dir, home])
        log.warning("clone of project %s failed: %s", project_id, message)
        changes = {"status": "failed", "error": f"cannot clone {project.origin}: {message}"}
    try:
        current = store.projects.get(project_id)
    except NotFound:  # deleted while cloning
        shutil.rmtree(home, ignore_errors=True)
        return None
    return store.projects.save(current.model_copy(update=changes))
