"""Recorded spans and the span tree of a turn (``GET .../turns/{turn_id}/trace``), pure.

A turn's tree is its root span (``invoke_agent``, id ``core.tracing.turn_span_id``) and every span
of the same trace under it: its model calls (and the replica's span of each), tools, hooks,
workflow runs and their nodes, memory operations, and a delegated child's own turn. Spans whose
parent is missing (recorded by a process that died before its parent ended, or pruned) are
attached to the root when they belong to the same turn, so nothing recorded is hidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from core.domain import Model
from core.tracing import Span


class SpanRecord(Model):
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str
    kind: str = "internal"
    start: datetime
    end: datetime | None = None
    duration_ms: float | None = None
    status: str = "unset"
    status_message: str = ""
    process: str = ""
    conversation_id: str | None = None
    turn_id: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)


class SpanNode(SpanRecord):
    children: list[SpanNode] = Field(default_factory=list)


def span_record(span: Span) -> SpanRecord:
    start = datetime.fromtimestamp(span.start_ns / 1e9, UTC)
    end = datetime.fromtimestamp(span.end_ns / 1e9, UTC) if span.end_ns is not None else None
    duration = (span.end_ns - span.start_ns) / 1e6 if span.end_ns is not None else None
    return SpanRecord(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        name=span.name,
        kind=span.kind.value,
        start=start,
        end=end,
        duration_ms=None if duration is None else round(duration, 3),
        status=span.status,
        status_message=span.status_message,
        process=span.service,
        conversation_id=span.conversation_id,
        turn_id=span.turn_id,
        attributes={k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()},
    )


def span_tree(records: Iterable[SpanRecord], root_id: str) -> SpanNode | None:
    """The tree under ``root_id`` (children by start time); None when the root was never
    recorded (a turn still running, or one that ran before tracing was on)."""
    nodes = {r.span_id: SpanNode(**r.model_dump()) for r in records}
    root = nodes.get(root_id)
    if root is None:
        return None
    below = _descendants(nodes, root_id)
    for span_id in below:
        node = nodes[span_id]
        parent = nodes.get(node.parent_span_id or "")
        home = parent if parent is not None and parent.span_id in below | {root_id} else root
        home.children.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.start, n.span_id))
    return root


def _descendants(nodes: dict[str, SpanNode], root_id: str) -> set[str]:
    """Spans under the root, and orphans (their parent never recorded) of the same trace."""
    children: dict[str, list[str]] = {}
    for node in nodes.values():
        children.setdefault(node.parent_span_id or "", []).append(node.span_id)
    found: set[str] = set()
    frontier = [root_id]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found and child != root_id:
                found.add(child)
                frontier.append(child)
    turn_id = nodes[root_id].turn_id
    orphans = {
        n.span_id
        for n in nodes.values()
        if n.span_id != root_id
        and n.parent_span_id
        and n.parent_span_id not in nodes
        and n.turn_id is not None
        and n.turn_id == turn_id
    }
    for orphan in orphans - found:
        found.add(orphan)
        frontier = [orphan]
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
    return found
