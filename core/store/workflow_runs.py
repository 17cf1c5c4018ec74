"""Storage of workflow runs and their node history (storage only, no business rules).

A run is one ``workflow_runs`` row; each token is one ``workflow_node_history`` row, inserted when
the token is created and updated as it moves (waiting → done / failed / cancelled). The coordinator
writes one transaction per planning batch: the run row (when it changed) and every touched token.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, insert, select, update

from core.errors import NotFound
from core.store import schema
from core.store.ops_base import StoreOps
from core.workflows import NodeRecord, WorkflowRun


class WorkflowRunOps(StoreOps):
    """Runs and node history over one database."""

    def insert(self, run: WorkflowRun, conn: Connection | None = None) -> WorkflowRun:
        parent_run = run.parent.run_id if run.parent and run.parent.type == "workflow" else None
        with self._write(conn) as c:
            c.execute(
                insert(schema.workflow_runs).values(
                    id=run.id,
                    workflow_id=run.workflow_id,
                    status=run.status.value,
                    client_id=run.client_id,
                    parent_run_id=parent_run,
                    created_at=run.created_at.isoformat(),
                    data=run.model_dump_json(),
                )
            )
        return run

    def save(self, run: WorkflowRun, conn: Connection | None = None) -> WorkflowRun:
        t = schema.workflow_runs
        with self._write(conn) as c:
            c.execute(
                update(t)
                .where(t.c.id == run.id)
                .values(status=run.status.value, data=run.model_dump_json())
            )
        return run

    def get(self, run_id: str, client_id: str | None = None) -> WorkflowRun:
        t = schema.workflow_runs
        query = select(t.c.data).where(t.c.id == run_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self.db.connect() as c:
            found = c.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"workflow run {run_id} not found")
        return WorkflowRun.model_validate_json(found)

    def children(self, parent_run_id: str) -> list[WorkflowRun]:
        t = schema.workflow_runs
        query = select(t.c.data).where(t.c.parent_run_id == parent_run_id).order_by(t.c.id)
        with self.db.connect() as c:
            return [WorkflowRun.model_validate_json(row) for row in c.execute(query).scalars()]

    def list_runs(
        self, *, workflow_id: str | None = None, client_id: str | None = None, limit: int = 100
    ) -> list[WorkflowRun]:
        """Runs, newest first, optionally of one workflow and/or one client."""
        t = schema.workflow_runs
        query = select(t.c.data)
        if workflow_id is not None:
            query = query.where(t.c.workflow_id == workflow_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        query = query.order_by(t.c.id.desc()).limit(limit)
        with self.db.connect() as c:
            return [WorkflowRun.model_validate_json(row) for row in c.execute(query).scalars()]

    def record(
        self,
        run: WorkflowRun | None,
        created: Sequence[NodeRecord],
        changed: Sequence[NodeRecord],
    ) -> None:
        """One transaction: the run row (if given), new history rows, changed history rows."""
        t = schema.workflow_node_history
        with self.db.begin() as c:
            if run is not None:
                self.save(run, c)
            if created:
                c.execute(insert(t), [self._row(r) for r in created])
            if changed:
                c.execute(
                    update(t)
                    .where(t.c.run_id == bindparam("b_run"), t.c.seq == bindparam("b_seq"))
                    .values(state=bindparam("b_state"), data=bindparam("b_data")),
                    [
                        {
                            "b_run": r.run_id,
                            "b_seq": r.seq,
                            "b_state": r.state,
                            "b_data": r.model_dump_json(),
                        }
                        for r in changed
                    ],
                )

    @staticmethod
    def _row(record: NodeRecord) -> dict[str, object]:
        return {
            "run_id": record.run_id,
            "seq": record.seq,
            "token_id": record.token_id,
            "node_id": record.node_id,
            "state": record.state,
            "data": record.model_dump_json(),
        }

    def history(self, run_id: str) -> list[NodeRecord]:
        t = schema.workflow_node_history
        query = select(t.c.data).where(t.c.run_id == run_id).order_by(t.c.seq)
        with self.db.connect() as c:
            return [NodeRecord.model_validate_json(row) for row in c.execute(query).scalars()]
