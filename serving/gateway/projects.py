"""Projects: repositories a client's agents work on (create, list, get, update, delete, push).

A project is created from a local repository path, a URL Wonder clones, or nothing (Wonder creates
a bare repository under its data dir). Another client's project is a 404, like a missing one.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from starlette.concurrency import run_in_threadpool

from core.domain import Project
from core.git import REPOSITORY_PATTERN, looks_like_url
from core.projects import (
    check_deletable,
    create_project,
    delete_project,
    push_default_branch,
    remove_project_workspaces,
    update_project,
)
from core.settings import settings_from_env
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context
from serving.gateway.protocol import Items

router = APIRouter(prefix="/v1/projects", tags=["projects"])

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

    @model_validator(mode="after")
    def _origin_to_push_to(self) -> ProjectCreate:
        if self.push_on_merge and (self.repository is None or not looks_like_url(self.repository)):
            raise ValueError("push_on_merge: only a project cloned from a URL has an origin")
        return self


class ProjectUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    default_branch: str | None = Field(None, max_length=200, pattern=BRANCH_PATTERN)
    push_on_merge: StrictBool | None = Field(
        None, description="Only for a project cloned from a URL (409 otherwise)"
    )


class Pushed(BaseModel):
    project_id: str
    branch: str
    commit: str


ProjectList = Items[Project]


@router.post("", status_code=201, response_model=Project, summary="Create a project")
def create(body: ProjectCreate, context: Context, client_id: ClientId, audit: Audit) -> Project:
    project = create_project(
        context.store,
        settings_from_env(context.settings_env),
        client_id=client_id,
        name=body.name,
        repository=body.repository,
        default_branch=body.default_branch,
        push_on_merge=body.push_on_merge,
    )
    audit.record("project.create", f"project:{project.id}", {"name": project.name})
    return project


@router.get("", response_model=ProjectList, summary="List your projects")
def list_projects(context: Context, client_id: ClientId) -> ProjectList:
    return ProjectList(items=context.store.projects.list_for_client(client_id))


@router.get("/{project_id}", response_model=Project, summary="Get a project")
def get(project_id: str, context: Context, client_id: ClientId) -> Project:
    return context.store.projects.get(project_id, client_id=client_id)


@router.patch("/{project_id}", response_model=Project, summary="Rename it or change its branch")
def update(
    project_id: str, body: ProjectUpdate, context: Context, client_id: ClientId, audit: Audit
) -> Project:
    project = context.store.projects.get(project_id, client_id=client_id)
    updated = update_project(
        context.store,
        project,
        name=body.name,
        default_branch=body.default_branch,
        push_on_merge=body.push_on_merge,
    )
    audit.record("project.update", f"project:{project_id}", body.model_dump(exclude_none=True))
    return updated


@router.post(
    "/{project_id}/push",
    response_model=Pushed,
    summary="Push the default branch back to the URL the project was cloned from (409 without an "
    "origin or when the origin has commits the project lacks; 503 when it cannot be reached)",
)
def push(project_id: str, context: Context, client_id: ClientId, audit: Audit) -> Pushed:
    project = context.store.projects.get(project_id, client_id=client_id)
    commit = push_default_branch(project)
    details = {"branch": project.default_branch, "commit": commit}
    audit.record("project.push", f"project:{project_id}", details)
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
