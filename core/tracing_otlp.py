"""OTLP export of this process's spans, when the standard ``OTEL_EXPORTER_OTLP_*`` settings ask.

OpenTelemetry's SDK and exporters are imported only here (``core.tracing`` itself needs none of
them); without an endpoint the exporter is never built. The
exporter reads the standard variables itself (endpoint, headers, timeout, certificates,
compression). Spans go over OTLP/HTTP (protobuf), which Phoenix, Langfuse, Jaeger and the
OpenTelemetry collector all take; gRPC is not offered (its client would add seconds to the start of
every worker process). Spans are batched (``OTEL_BSP_*``) and sent from the
SDK's own thread; a process's last spans are flushed when it exits normally.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from core.tracing import Span
from core.tracing import SpanKind as WonderKind

SCOPE = InstrumentationScope("wonder", schema_url="https://opentelemetry.io/schemas/1.37.0")
KINDS = {
    WonderKind.INTERNAL: SpanKind.INTERNAL,
    WonderKind.CLIENT: SpanKind.CLIENT,
    WonderKind.SERVER: SpanKind.SERVER,
}
DEFAULT_SCHEDULE_DELAY_MS = 500.0


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None  # None: the SDK reads it
    return HttpExporter(endpoint=endpoint)


class OtlpSpans:
    """A ``core.tracing.SpanExporter`` that sends spans over OTLP in batches."""

    def __init__(self, service_name: str, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        delay = None if "OTEL_BSP_SCHEDULE_DELAY" in env else DEFAULT_SCHEDULE_DELAY_MS
        self.resource = Resource.create({"service.name": service_name})
        self.processor = BatchSpanProcessor(_exporter(env), schedule_delay_millis=delay)
        atexit.register(self.processor.shutdown)

    def export(self, span: Span) -> None:
        self.processor.on_end(self.readable(span))

    def readable(self, span: Span) -> ReadableSpan:
        parent = (
            SpanContext(int(span.trace_id, 16), int(span.parent_span_id, 16), is_remote=True)
            if span.parent_span_id
            else None
        )
        status = {
            "ok": Status(StatusCode.OK),
            "error": Status(StatusCode.ERROR, span.status_message or None),
        }.get(span.status, Status(StatusCode.UNSET))
        attributes = dict(span.attributes)
        attributes["wonder.process"] = span.service
        return ReadableSpan(
            name=span.name,
            context=SpanContext(
                int(span.trace_id, 16),
                int(span.span_id, 16),
                is_remote=False,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            ),
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            kind=KINDS[span.kind],
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=SCOPE,
        )

    def flush(self, timeout_s: float = 10.0) -> bool:
        return bool(self.processor.force_flush(int(timeout_s * 1000)))
