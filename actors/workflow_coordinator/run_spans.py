"""A workflow run as part of a trace: ``invoke_workflow {workflow}`` and a span per node execution.

A run started from a turn (a workflow tool, a workflow hook) carries the W3C ``traceparent`` of
the span that started it (``WorkflowRun.trace``), so its span is a child of that tool's span in
the turn's trace; a run started over the API starts its own trace. The run span's id is derived
from the run id, so a coordinator that resumes the run after a crash continues the same tree.
Each node execution (a task, an agent call, a subworkflow) is a ``workflow_node {node}`` span
under it, current while the node runs: the executor task, the agent's turn or the child run joins
the trace under it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from core import tracing
from core.tracing import Span, TraceContext
from core.workflows import WorkflowRun


def run_span_id(run_id: str) -> str:
    return hashlib.sha256(f"wonder-run:{run_id}".encode()).hexdigest()[:16]


def run_trace_id(run_id: str) -> str:
    return hashlib.sha256(f"wonder-run-trace:{run_id}".encode()).hexdigest()[:32]


class RunTrace:
    """The span of one run, opened once work starts here, closed when the run ends."""

    def __init__(self, run: WorkflowRun) -> None:
        caller = TraceContext.parse(run.trace)
        self.parent_span_id = caller.span_id if caller is not None else None
        trace_id = caller.trace_id if caller is not None else run_trace_id(run.id)
        self.context = TraceContext(trace_id, run_span_id(run.id))
        self.run = run
        self._span: Span | None = None

    def open(self) -> None:
        if self._span is not None:
            return
        run = self.run
        self._span = Span(
            name=f"invoke_workflow {run.workflow_id}",
            trace_id=self.context.trace_id,
            span_id=self.context.span_id,
            parent_span_id=self.parent_span_id,
            conversation_id=run.context.conversation_id,
            turn_id=run.context.turn_id,
        )
        self._span.update(
            {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": run.workflow_id,
                "gen_ai.conversation.id": run.context.conversation_id,
                "gen_ai.agent.id": run.context.agent_id,
                "wonder.workflow.run_id": run.id,
                "wonder.workflow.version": run.workflow_version,
            }
        )

    @contextmanager
    def node(self, token_id: str, node_id: str, kind: str) -> Iterator[Span]:
        """One node execution, under the run's span."""
        self.open()
        with tracing.span(
            f"workflow_node {node_id}",
            parent=self.context,
            conversation_id=self.run.context.conversation_id,
            turn_id=self.run.context.turn_id,
            attributes={
                "wonder.workflow.run_id": self.run.id,
                "wonder.workflow.node_id": node_id,
                "wonder.workflow.token_id": token_id,
                "wonder.workflow.node_kind": kind,
            },
        ) as span:
            yield span

    def ended(self, status: str, error: str | None = None) -> None:
        if self._span is None:
            return
        span, self._span = self._span, None
        span.set("wonder.workflow.status", status)
        if error is not None and status == "failed":
            span.fail("workflow_failed", error)
        span.end()
