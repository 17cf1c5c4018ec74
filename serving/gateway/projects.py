"""Projects: repositories a client's agents work on (create, list, get, update, delete).

A project is created from a local repository path, a URL Wonder clones, or nothing (Wonder creates
a bare repository under its data dir). Another client's project is a 404, like a missing one.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from core.domain import Project
from core.git import REPOSITORY_PATTERN
from core.projects import create_project, delete_project, update_project
from core.settings import settings_from_env
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


class ProjectUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    default_branch: str | None = Field(None, max_length=200, pattern=BRANCH_PATTERN)


ProjectList = Items[Project]


@router.post("", status_code=201, response_model=Project, summary="Create a project")
def create(body: ProjectCreate, context: Context, client_id: ClientId) -> Project:
    return create_project(
        context.store,
        settings_from_env(context.settings_env),
        client_id=client_id,
        name=body.name,
        repository=body.repository,
        default_branch=body.default_branch,
    )


@router.get("", response_model=ProjectList, summary="List your projects")
def list_projects(context: Context, client_id: ClientId) -> ProjectList:
    return ProjectList(items=context.store.projects.list_for_client(client_id))


@router.get("/{project_id}", response_model=Project, summary="Get a project")
def get(project_id: str, context: Context, client_id: ClientId) -> Project:
    return context.store.projects.get(project_id, client_id=client_id)


@router.patch("/{project_id}", response_model=Project, summary="Rename it or change its branch")
def update(project_id: str, body: ProjectUpdate, context: Context, client_id: ClientId) -> Project:
    project = context.store.projects.get(project_id, client_id=client_id)
    return update_project(
        context.store, project, name=body.name, default_branch=body.default_branch
    )


@router.delete(
    "/{project_id}",
    status_code=204,
    summary="Delete a project no agent is scoped to (Wonder's own repositories go with it)",
)
def delete(project_id: str, context: Context, client_id: ClientId) -> None:
    project = context.store.projects.get(project_id, client_id=client_id)
    delete_project(context.store, settings_from_env(context.settings_env), project)
