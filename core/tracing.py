"""Spans of a turn's trace, in OpenTelemetry's model, without OpenTelemetry's SDK on the hot path.

A turn is one trace (docs/observability.md). Its root span, ``invoke_agent {agent}``, has an id
derived from the turn's id (``turn_span_id``), so every incarnation of a conversation actor that
runs the turn (a crash resumed) continues the same tree; the trace id is the turn's own
(``turn_trace_id``) unless the turn joins another trace (a delegated child, a workflow's agent
call, a request that carried a W3C ``traceparent``: ``core.store`` ``turn_traces``).

Inside a process the current span travels in a context variable (``current``); across processes it
travels explicitly: every Ray actor or task call and every Serve request of a turn carries the W3C
``traceparent`` of its caller's span as an argument or header (``current_traceparent`` on the
calling side, ``attached`` on the called side). Ray's own tracing hook is not used.

A finished span goes to this process's exporters (``add_exporter``): the store (so
``GET .../trace`` reads a turn's tree from our own records) and, when the standard
``OTEL_EXPORTER_OTLP_*`` settings are present, an OTLP exporter (``core.tracing_otlp``). With no
exporter, a span costs its ids and a clock read. Message contents go into span attributes only when
the operator opts in (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``: ``capture_content``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

log = logging.getLogger("wonder.tracing")

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]
Attributes = dict[str, AttributeValue]

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
MAX_ATTRIBUTE_CHARS = 16_000
"""A content attribute longer than this is cut (the model call records keep the whole text)."""


class SpanKind(StrEnum):
    INTERNAL = "internal"
    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class TraceContext:
    """Where new spans attach: a trace and the span that will be their parent."""

    trace_id: str
    span_id: str
    sampled: bool = True

    def traceparent(self) -> str:
        """The W3C ``traceparent`` header value."""
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    @classmethod
    def parse(cls, value: str | None) -> TraceContext | None:
        """A ``traceparent`` value as a context; None for anything else (never an error: a
        malformed header starts a new trace, as the W3C spec says)."""
        if not value or len(value) > 55:
            return None
        found = TRACEPARENT.match(value.strip().lower())
        if found is None:
            return None
        trace_id, span_id, flags = found.groups()
        if trace_id == "0" * 32 or span_id == "0" * 16:
            return None
        return cls(trace_id, span_id, sampled=bool(int(flags, 16) & 1))


def turn_trace_id(turn_id: str) -> str:
    """The trace id of a turn that starts its own trace (stable: derived from its id)."""
    return hashlib.sha256(f"wonder-trace:{turn_id}".encode()).hexdigest()[:32]


def turn_span_id(turn_id: str) -> str:
    """The id of a turn's root span (``invoke_agent``), the same in every incarnation."""
    return hashlib.sha256(f"wonder-turn:{turn_id}".encode()).hexdigest()[:16]


def new_span_id() -> str:
    return f"{random.getrandbits(64) or 1:016x}"


def new_trace_id() -> str:
    return f"{random.getrandbits(128) or 1:032x}"


@dataclass(slots=True)
class Span:
    """One operation: open until ``end``; its attributes follow OpenTelemetry's GenAI
    conventions (``gen_ai.*``) where one applies, ``wonder.*`` otherwise."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    kind: SpanKind = SpanKind.INTERNAL
    start_ns: int = field(default_factory=time.time_ns)
    end_ns: int | None = None
    attributes: Attributes = field(default_factory=dict)
    status: str = "unset"  # unset | ok | error
    status_message: str = ""
    conversation_id: str | None = None
    turn_id: str | None = None
    service: str = ""
    """The process that ran it (``wonder.process`` / OpenTelemetry's ``service.name`` suffix)."""

    def context(self) -> TraceContext:
        return TraceContext(self.trace_id, self.span_id)

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self.attributes[key] = value

    def update(self, values: Mapping[str, AttributeValue | None]) -> None:
        for key, value in values.items():
            self.set(key, value)

    def fail(self, error_type: str, message: str = "") -> None:
        """The operation ended in an error (``error.type`` is a low-cardinality class)."""
        self.status = "error"
        self.status_message = message[:500]
        self.attributes["error.type"] = error_type[:100] or "_OTHER"

    def end(self, end_ns: int | None = None) -> None:
        """Close the span and hand it to this process's exporters (once)."""
        if self.end_ns is not None:
            return
        self.end_ns = end_ns or time.time_ns()
        if self.status == "unset" and "error.type" not in self.attributes:
            self.status = "ok"
        _TRACER.export(self)


class SpanExporter(Protocol):
    """Where finished spans go; ``export`` must not block (queue, then write elsewhere)."""

    def export(self, span: Span) -> None: ...


class _Tracer:
    """This process's exporters and its process name."""

    def __init__(self) -> None:
        self.exporters: list[SpanExporter] = []
        self.recorders: list[SpanExporter] = []  # also take spans other processes exported
        self.service = "wonder"

    def export(self, span: Span) -> None:
        if not span.service:
            span.service = self.service
        self._send(span, self.exporters)

    def export_remote(self, span: Span) -> None:
        self._send(span, self.recorders)

    @staticmethod
    def _send(span: Span, exporters: list[SpanExporter]) -> None:
        for exporter in exporters:
            try:
                exporter.export(span)
            except Exception:  # an exporter must never fail the operation it observed
                log.exception("span exporter %s failed", type(exporter).__name__)


_TRACER = _Tracer()
_current: ContextVar[TraceContext | None] = ContextVar("wonder_trace_context", default=None)


def add_exporter(exporter: SpanExporter, *, remote: bool = False) -> None:
    """Send this process's finished spans to ``exporter`` too (once per exporter); ``remote``:
    also the spans another process ran and exported itself, reported back here
    (``record_remote``: the model replica's), which only our own records want."""
    if exporter not in _TRACER.exporters:
        _TRACER.exporters.append(exporter)
    if remote and exporter not in _TRACER.recorders:
        _TRACER.recorders.append(exporter)


def remove_exporter(exporter: SpanExporter) -> None:
    for exporters in (_TRACER.exporters, _TRACER.recorders):
        if exporter in exporters:
            exporters.remove(exporter)


def span_data(span: Span) -> dict[str, object]:
    """A finished span as plain data (to report it to another process: ``record_remote``)."""
    return {
        "name": span.name,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "kind": span.kind.value,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "attributes": dict(span.attributes),
        "status": span.status,
        "status_message": span.status_message,
        "service": span.service or _TRACER.service,
    }


def record_remote(data: Mapping[str, object]) -> None:
    """Keep a span another process ran (``span_data``) in this process's own records; malformed
    data is dropped (it came over the wire)."""
    if not _TRACER.recorders:
        return
    try:
        received = Span(
            name=str(data["name"])[:200],
            trace_id=_hex(data["trace_id"], 32),
            span_id=_hex(data["span_id"], 16),
            parent_span_id=_hex(data["parent_span_id"], 16) if data.get("parent_span_id") else None,
            kind=SpanKind(str(data.get("kind", "internal"))),
            start_ns=int(str(data["start_ns"])),
            end_ns=int(str(data["end_ns"])),
            attributes=_attributes(data.get("attributes")),
            status=str(data.get("status", "unset")),
            status_message=str(data.get("status_message", ""))[:500],
            service=str(data.get("service", ""))[:100],
        )
    except (KeyError, ValueError, TypeError):
        log.warning("dropped a malformed remote span")
        return
    _TRACER.export_remote(received)


def _hex(value: object, length: int) -> str:
    text = str(value)
    if len(text) != length or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"not a {length}-digit id")
    return text


def _attributes(value: object) -> Attributes:
    if not isinstance(value, dict):
        return {}
    out: Attributes = {}
    for key, item in list(value.items())[:128]:
        if isinstance(item, str | bool | int | float):
            out[str(key)[:200]] = item
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            out[str(key)[:200]] = [str(v) for v in item][:64]
    return out


def set_process(name: str) -> None:
    """Name this process in its spans (``wonder.process``: gateway, conversation, executor...)."""
    _TRACER.service = name


def exporting() -> bool:
    """Whether finished spans go anywhere in this process."""
    return bool(_TRACER.exporters)


def current() -> TraceContext | None:
    """The span new spans of this task attach to."""
    return _current.get()


def current_traceparent() -> str | None:
    """The ``traceparent`` to send with a call made now (None outside any trace)."""
    context = _current.get()
    return context.traceparent() if context is not None else None


@contextmanager
def attached(context: TraceContext | str | None) -> Iterator[TraceContext | None]:
    """Run the block under ``context`` (a ``TraceContext`` or a ``traceparent``); a None or
    malformed one leaves the current context as it is."""
    parsed = TraceContext.parse(context) if isinstance(context, str) else context
    if parsed is None:
        yield _current.get()
        return
    token = _current.set(parsed)
    try:
        yield parsed
    finally:
        _current.reset(token)


def start_span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes | None = None,
    parent: TraceContext | None = None,
    span_id: str | None = None,
    trace_id: str | None = None,
    conversation_id: str | None = None,
    turn_id: str | None = None,
) -> Span:
    """A new open span under ``parent`` (default: the current context; none: a new trace)."""
    parent = parent if parent is not None else _current.get()
    if parent is not None:
        trace, parent_id = parent.trace_id, parent.span_id
    else:
        trace, parent_id = trace_id or new_trace_id(), None
    return Span(
        name=name,
        trace_id=trace,
        span_id=span_id or new_span_id(),
        parent_span_id=parent_id,
        kind=kind,
        attributes=dict(attributes or {}),
        conversation_id=conversation_id,
        turn_id=turn_id,
    )


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes | None = None,
    parent: TraceContext | None = None,
    conversation_id: str | None = None,
    turn_id: str | None = None,
) -> Iterator[Span]:
    """A span around the block, current inside it; an exception marks it failed (and goes on).

    Not for async generators that yield inside the block: a context variable set there would be
    reset in another context (use ``start_span`` and ``Span.end`` there)."""
    opened = start_span(
        name,
        kind=kind,
        attributes=attributes,
        parent=parent,
        conversation_id=conversation_id,
        turn_id=turn_id,
    )
    token = _current.set(opened.context())
    try:
        yield opened
    except BaseException as exc:
        opened.fail(error_type_of(exc), str(exc))
        raise
    finally:
        _current.reset(token)
        opened.end()


def error_type_of(exc: BaseException) -> str:
    """``error.type`` for an exception: a Wonder error's code, else the class name."""
    code = getattr(exc, "code", None)
    return str(code) if code is not None else type(exc).__name__


def capture_content() -> bool:
    """Whether message contents go into span attributes (the operator's opt-in)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def clipped(text: str) -> str:
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"
