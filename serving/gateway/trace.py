"""A turn's trace as a span tree (``GET .../turns/{turn_id}/trace``), from our own records.

The turn's root span (``invoke_agent``) and everything under it, whichever process ran it: model
calls (and the model replica's span of each), tools, hooks, executor tasks, workflow runs and
their nodes, memory operations, a delegated child's turn. Access as for the turn
(``serving.gateway.calls.readable_turn``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from core.trace_records import SpanNode, span_tree
from core.tracing import turn_span_id, turn_trace_id
from serving.gateway.auth import ClientId, Context
from serving.gateway.calls import readable_turn
from serving.gateway.protocol import WireModel


class TurnTraceOut(WireModel):
    trace_id: str
    root: SpanNode | None = None
    """None while the turn's root span is still open (it is recorded when the turn ends), or
    for a turn that ran with tracing off."""


router = APIRouter(prefix="/v1/conversations/{conversation_id}")


@router.get(
    "/turns/{turn_id}/trace",
    response_model=TurnTraceOut,
    tags=["turns"],
    summary="The turn's trace: its spans across the cluster as a tree (the waterfall)",
)
def get_trace(conversation_id: str, turn_id: str, context: Context, client_id: ClientId) -> Any:
    readable_turn(context, client_id, conversation_id, turn_id)
    joined = context.store.records.trace_of(turn_id)
    trace_id = joined.trace_id if joined is not None else turn_trace_id(turn_id)
    spans = context.store.records.spans(trace_id)
    return TurnTraceOut(trace_id=trace_id, root=span_tree(spans, turn_span_id(turn_id)))
