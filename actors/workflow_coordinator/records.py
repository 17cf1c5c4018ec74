"""A run's tokens as stored history rows, and back (the storage itself is
``core.store.workflow_runs``).

``node_record`` writes everything planning knows about a token, the fan-out it started included;
``restored_state`` rebuilds a ``RunState`` from the run row and those records, for a coordinator
re-created after the previous one was lost (``resumption``).
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.workflow_coordinator.domain import (
    BranchStep,
    Group,
    JoinState,
    NodeError,
    RunState,
    Token,
    TokenState,
    fanout_group_id,
)
from core.workflows import (
    FanOut,
    JoinProgress,
    NodeKind,
    NodeRecord,
    RunError,
    WorkflowDef,
    WorkflowRun,
)


def node_record(
    run_id: str,
    token: Token,
    kind: NodeKind,
    child_run_id: str | None,
    fanout: FanOut | None = None,
) -> NodeRecord:
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
        item=token.item,
        index=token.index,
        from_foreach=token.from_foreach,
        branches=list(token.branches) if token.branches is not None else None,
        fanout=fanout,
        reused_from=token.reused_from,
    )


def fanout_of(state: RunState, token: Token) -> FanOut | None:
    """The fan-out ``token`` started, with the progress of the joins collecting it."""
    group = state.groups.get(fanout_group_id(token))
    if group is None:
        return None
    joins = [
        JoinProgress(node_id=join.node_id, arrivals=dict(join.arrivals), fired=join.fired)
        for (_node, gid), join in state.joins.items()
        if gid == group.id
    ]
    return FanOut(group_id=group.id, size=group.size, join_node_id=group.join_node_id, joins=joins)


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


def restored_state(
    run: WorkflowRun, workflow: WorkflowDef, records: Sequence[NodeRecord]
) -> RunState:
    """The planning state of ``run`` as its records left it."""
    state = RunState.new(run.id, workflow, run.input)
    state.status = run.status
    state.output = run.output
    if run.error is not None:
        state.error = NodeError(run.error.code, run.error.message, run.error.retriable)
        if run.error.node_id and run.error.token_id:
            state.failed_node = (run.error.node_id, run.error.token_id)
    for record in records:
        token = _token(record)
        state.tokens[token.id] = token
        if token.state.live:
            state.live.add(token.id)
        state.next_seq = max(state.next_seq, token.seq + 1)
        if record.fanout is not None:
            fanout = record.fanout
            group = Group(fanout.group_id, fanout.size, token.id, fanout.join_node_id)
            state.groups[group.id] = group
            for join in fanout.joins:
                state.joins[(join.node_id, group.id)] = JoinState(
                    join.node_id, group.id, dict(join.arrivals), join.fired
                )
    return state


def _token(record: NodeRecord) -> Token:
    error = record.error
    return Token(
        id=record.token_id,
        seq=record.seq,
        node_id=record.node_id,
        state=TokenState(record.state),
        created_at=record.created_at,
        parent_id=record.parent_token_id,
        branch=tuple(BranchStep(group, index) for group, index in record.branch),
        item=record.item,
        index=record.index,
        branches=tuple(record.branches) if record.branches is not None else None,
        from_foreach=record.from_foreach,
        input=record.input,
        output=record.output,
        error=NodeError(error.code, error.message, error.retriable) if error else None,
        attempt=record.attempt,
        finished_at=record.finished_at,
        reused_from=record.reused_from,
    )
