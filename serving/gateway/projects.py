"""Projects: repositories a client's agents work on (create, list, get, update, delete, push).

A project is created from a local repository path, a URL Wonder clones, or nothing (Wonder creates
a bare repository under its data dir), each only where the operator's policy allows the client
(``core.project_sources``). Another client's project is a 404, like a missing one.

A clone is slow and its time is the remote's to choose, so it never runs on a request's thread:
``POST`` answers ``202`` with the project ``cloning`` (and its ``Location``), a few threads of
this replica's own (``WONDER_PROJECT_CLONE_WORKERS``) clone, and the client polls
``GET /v1/projects/{id}`` until it is ``ready`` or ``failed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from starlette.concurrency import run_in_threadpool

from core.domain import Project, ProjectCredentials
from core.errors import InvalidInput
from core.git import REPOSITORY_PATTERN, looks_like_url
from core.ids import utc_now
from core.project_clones import complete_clone
from core.project_sources import parse_remote
from core.projects import (
    check_deletable,
    create_project,
    delete_project,
    project_view,
    push_default_branch,
    remove_project_workspaces,
    update_project,
)
from core.settings import Settings
from core.store import Store
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context
from serving.gateway.protocol import Items

router = APIRouter(prefix="/v1/projects", tags=["projects"])
T = TypeVar("T")

# Git's rules for a branch name, as far as a pattern says them: "/"-separated components, dots
# only inside a component (no "..", none leading or trailing).
BRANCH_PATTERN = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(/[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*)*$"


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    repository: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        pattern=REPOSITORY_PATTERN,
        description="An absolute local path, or a URL to clone (scheme://... or user@host:path); "
        "omit to get a new repository",
    )
    default_branch: str | None = Field(
        None,
        max_length=200,
        pattern=BRANCH_PATTERN,
        description="Default: the repository's HEAD, else main",
    )
    push_on_merge: StrictBool = Field(
        False,
        description="Push the default branch back to the URL after each merge into it (needs a "
        "repository URL: only a cloned project has an origin)",
    )
    credentials: ProjectCredentials | None = Field(
        None,
        description="One of your secrets, sent to the repository URL as an Authorization header "
        "on each clone and push (needs a repository URL, and a host the operator allows "
        "credentials for)",
    )

    @model_validator(mode="after")
    def _origin_to_push_to(self) -> ProjectCreate:
        has_origin = self.repository is not None and looks_like_url(self.repository)
        if self.push_on_merge and not has_origin:
            raise ValueError("push_on_merge: only a project cloned from a URL has an origin")
        if self.credentials is not None and not has_origin:
            raise ValueError("credentials: only a project cloned from a URL has an origin")
        if self.repository is not None and looks_like_url(self.repository):
            try:
                parse_remote(self.repository)  # a malformed URL is the body's fault: 422
            except InvalidInput as exc:
                raise ValueError(exc.message) from None
        return self


class ProjectUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    default_branch: str | None = Field(None, max_length=200, pattern=BRANCH_PATTERN)
    push_on_merge: StrictBool | None = Field(
        None, description="Only for a project cloned from a URL (409 otherwise)"
    )
    credentials: ProjectCredentials | None = Field(
        None,
        description="Replace the project's credentials (only for a project cloned from a URL: 409 "
        "otherwise); null removes them",
    )


class Pushed(BaseModel):
    project_id: str
    branch: str
    commit: str


ProjectList = Items[Project]


class RemoteGit:
    """Git that talks to remotes (clones, pushes), on a few threads of this replica's own: a slow
    remote never holds a thread of the request pool, which every route shares."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="wonder-remote-git")
        self._pending: set[Future[Any]] = set()

    def start_clone(
        self, store: Store, settings: Settings, project: Project, branch: str | None
    ) -> None:
        job = self._pool.submit(complete_clone, store, settings, project.id, branch)
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def run(self, work: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self._pool.submit(work))


def remote_git(request: Request, settings: Settings) -> RemoteGit:
    """The replica's ``RemoteGit`` (made on first use)."""
    pool: RemoteGit | None = getattr(request.app.state, "remote_git", None)
    if pool is None:
        pool = request.app.state.remote_git = RemoteGit(settings.project_clone_workers)
    return pool


CREATED: dict[int | str, dict[str, Any]] = {
    202: {"model": Project, "description": "Cloning: poll the project until it is ready"}
}


@router.post(
    "",
    status_code=201,
    response_model=Project,
    responses=CREATED,
    summary="Create a project (a URL: 202, cloned in the background)",
)
async def create(
    body: ProjectCreate, request: Request, context: Context, client_id: ClientId, audit: Audit
) -> Project | JSONResponse:
    settings = context.settings
    project = await run_in_threadpool(
        create_project,
        context.store,
        settings,
        client_id=client_id,
        name=body.name,
        repository=body.repository,
        default_branch=body.default_branch,
        push_on_merge=body.push_on_merge,
        credentials=body.credentials,
    )
    details: dict[str, Any] = {
        "name": project.name,
        "repository": body.repository,
        "status": project.status,
    }
    if body.credentials is not None:
        details["credentials"] = body.credentials.model_dump(exclude_none=True)
    await run_in_threadpool(audit.record, "project.create", f"project:{project.id}", details)
    if project.status != "cloning":
        return project
    remote_git(request, settings).start_clone(context.store, settings, project, body.default_branch)
    return JSONResponse(
        status_code=202,
        content=project.model_dump(mode="json"),
        headers={"Location": f"/v1/projects/{project.id}"},
    )


@router.get("", response_model=ProjectList, summary="List your projects")
def list_projects(context: Context, client_id: ClientId) -> ProjectList:
    timeout, now = context.settings.project_clone_timeout_s, utc_now()
    found = context.store.projects.list_for_client(client_id)
    return ProjectList(items=[project_view(p, now, timeout) for p in found])


@router.get(
    "/{project_id}", response_model=Project, summary="Get a project (and how its clone goes)"
)
def get(project_id: str, context: Context, client_id: ClientId) -> Project:
    project = context.store.projects.get(project_id, client_id=client_id)
    return project_view(project, utc_now(), context.settings.project_clone_timeout_s)


@router.patch("/{project_id}", response_model=Project, summary="Rename it or change its branch")
def update(
    project_id: str, body: ProjectUpdate, context: Context, client_id: ClientId, audit: Audit
) -> Project:
    project = context.store.projects.get(project_id, client_id=client_id)
    updated = update_project(
        context.store,
        context.settings,
        project,
        name=body.name,
        default_branch=body.default_branch,
        push_on_merge=body.push_on_merge,
        credentials=body.credentials,
        drop_credentials="credentials" in body.model_fields_set and body.credentials is None,
    )
    details = body.model_dump(exclude_none=True)
    if "credentials" in body.model_fields_set and body.credentials is None:
        details["credentials"] = None
    audit.record("project.update", f"project:{project_id}", details)
    return updated


@router.post(
    "/{project_id}/push",
    response_model=Pushed,
    summary="Push the default branch back to the URL the project was cloned from (409 without an "
    "origin or when the origin has commits the project lacks; 503 when it cannot be reached)",
)
async def push(
    project_id: str, request: Request, context: Context, client_id: ClientId, audit: Audit
) -> Pushed:
    project = await run_in_threadpool(context.store.projects.get, project_id, client_id)
    settings = context.settings
    store = context.store
    commit = await remote_git(request, settings).run(
        lambda: push_default_branch(store, project, settings)
    )
    details = {"branch": project.default_branch, "commit": commit}
    await run_in_threadpool(audit.record, "project.push", f"project:{project_id}", details)
    return Pushed(project_id=project.id, branch=project.default_branch, commit=commit)


@router.delete(
    "/{project_id}",
    status_code=204,
    summary="Delete a project no agent is scoped to (its workspaces, and Wonder's own "
    "repositories, go with it)",
)
async def delete(project_id: str, context: Context, client_id: ClientId, audit: Audit) -> None:
    store = context.store
    project = await run_in_threadpool(store.projects.get, project_id, client_id)
    await run_in_threadpool(check_deletable, store, project)
    if context.workspaces is not None:
        await remove_project_workspaces(store, context.workspaces, project)
    await run_in_threadpool(delete_project, store, context.settings, project)
    await run_in_threadpool(audit.record, "project.delete", f"project:{project_id}", {})
