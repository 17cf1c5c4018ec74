"""Storage of projects and of where their workspaces live (storage only: the rules are in
``core.projects`` and ``core.workspaces``)."""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from core.domain import Project
from core.errors import NotFound
from core.store import schema
from core.store.database import Database
from core.workspaces import WorkspaceRecord


class ProjectOps:
    """Projects over one database; every read is scoped to the owning client."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, project: Project) -> Project:
        with self.db.begin() as c:
            c.execute(
                insert(schema.projects).values(
                    id=project.id, client_id=project.client_id, data=project.model_dump_json()
                )
            )
        return project

    def save(self, project: Project) -> Project:
        t = schema.projects
        with self.db.begin() as c:
            c.execute(update(t).where(t.c.id == project.id).values(data=project.model_dump_json()))
        return project

    def get(self, project_id: str, client_id: str | None = None) -> Project:
        t = schema.projects
        query = select(t.c.data).where(t.c.id == project_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self.db.connect() as c:
            found = c.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"project {project_id} not found")
        return Project.model_validate_json(found)

    def list_for_client(self, client_id: str) -> list[Project]:
        t = schema.projects
        with self.db.connect() as c:
            rows = c.execute(select(t.c.data).where(t.c.client_id == client_id).order_by(t.c.id))
            return [Project.model_validate_json(r) for r in rows.scalars()]

    def delete(self, project_id: str) -> None:
        with self.db.begin() as c:
            c.execute(delete(schema.projects).where(schema.projects.c.id == project_id))


class WorkspaceOps:
    """Where each workspace's worktree lives (``core.workspaces.WorkspaceRecord``), by its id."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(self, record: WorkspaceRecord) -> WorkspaceRecord:
        """Insert or replace the record of ``record.spec.workspace_id``."""
        t = schema.workspaces
        key, data = record.spec.workspace_id, record.model_dump_json()
        try:
            with self.db.begin() as c:
                c.execute(insert(t).values(id=key, project_id=record.spec.project_id, data=data))
        except IntegrityError:  # recorded before (or just now, by another process)
            with self.db.begin() as c:
                c.execute(update(t).where(t.c.id == key).values(data=data))
        return record

    def get(self, workspace_id: str) -> WorkspaceRecord | None:
        t = schema.workspaces
        with self.db.connect() as c:
            found = c.execute(select(t.c.data).where(t.c.id == workspace_id)).scalar_one_or_none()
        return None if found is None else WorkspaceRecord.model_validate_json(found)

    def list_for_project(self, project_id: str) -> list[WorkspaceRecord]:
        t = schema.workspaces
        with self.db.connect() as c:
            rows = c.execute(select(t.c.data).where(t.c.project_id == project_id).order_by(t.c.id))
            return [WorkspaceRecord.model_validate_json(r) for r in rows.scalars()]

    def delete(self, workspace_id: str) -> None:
        with self.db.begin() as c:
            c.execute(delete(schema.workspaces).where(schema.workspaces.c.id == workspace_id))
