"""A run's tokens as stored history rows (the storage itself is ``core.store.workflow_runs``)."""

from __future__ import annotations

from actors.workflow_coordinator.domain import NodeError, Token
from core.workflows import NodeKind, NodeRecord, RunError


def node_record(run_id: str, token: Token, kind: NodeKind, child_run_id: str | None) -> NodeRecord:
    """The stored history row for ``token``."""
    return NodeRecord(
        run_id=run_id,
        token_id=token.id,
        seq=token.seq,
        node_id=token.node_id,
        kind=kind,
        state=token.state.value,
        parent_token_id=token.parent_id,
        branch=[(step.group_id, step.index) for step in token.branch],
        attempt=token.attempt,
        input=token.input,
        output=token.output,
        error=run_error(token.error) if token.error else None,
        child_run_id=child_run_id,
        created_at=token.created_at,
        finished_at=token.finished_at,
    )


def run_error(
    error: NodeError, node_id: str | None = None, token_id: str | None = None
) -> RunError:
    return RunError(
        code=error.code,
        message=error.message,
        retriable=error.retriable,
        node_id=node_id,
        token_id=token_id,
    )
