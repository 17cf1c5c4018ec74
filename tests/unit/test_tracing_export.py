"""Spans exported over OTLP/HTTP to a receiver the test starts on 127.0.0.1 (observability.md).

The receiver decodes what arrives with OpenTelemetry's own protobuf definitions: the spans keep
their trace, their parents and their ``gen_ai.*`` attributes, under the configured service name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from core import tracing
from core.tracing import SpanKind
from core.tracing_otlp import OtlpSpans
from core.tracing_setup import otel_env, otlp_configured

pytestmark = pytest.mark.timeout(30)


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server: Any = self.server
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        server.paths.append(self.path)
        server.requests.append(ExportTraceServiceRequest.FromString(body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_spans_reach_an_otlp_receiver_nested_with_their_attributes(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    assert otlp_configured()
    assert otel_env()["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == receiver.url
    exporter = OtlpSpans("wonder-test")
    tracing.add_exporter(exporter)
    try:
        with tracing.span("invoke_agent helper", conversation_id="conv_1") as root:
            root.set("gen_ai.conversation.id", "conv_1")
            with tracing.span("chat qwen", kind=SpanKind.CLIENT) as chat:
                chat.update({"gen_ai.request.model": "qwen", "gen_ai.usage.input_tokens": 12})
            with pytest.raises(ValueError), tracing.span("execute_tool lookup"):
                raise ValueError("no such row")
        assert exporter.flush(10)
    finally:
        tracing.remove_exporter(exporter)
        exporter.processor.shutdown()

    assert set(receiver.paths) == {"/v1/traces"}
    spans = {}
    for request in receiver.requests:
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert service["service.name"] == "wonder-test"
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans[span.name] = span
    assert set(spans) == {"invoke_agent helper", "chat qwen", "execute_tool lookup"}
    top, call, tool = spans["invoke_agent helper"], spans["chat qwen"], spans["execute_tool lookup"]
    assert {top.trace_id, call.trace_id, tool.trace_id} == {bytes.fromhex(root.trace_id)}
    assert top.parent_span_id == b"" and call.parent_span_id == top.span_id == tool.parent_span_id
    attributes = {a.key: a.value for a in call.attributes}
    assert attributes["gen_ai.request.model"].string_value == "qwen"
    assert attributes["gen_ai.usage.input_tokens"].int_value == 12
    assert call.kind == call.SPAN_KIND_CLIENT
    assert tool.status.code == tool.status.STATUS_CODE_ERROR
    assert {a.key: a.value.string_value for a in tool.attributes}["error.type"] == "ValueError"


def test_export_is_off_without_an_endpoint_or_when_disabled() -> None:
    assert not otlp_configured({})
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert otlp_configured(endpoint)
    assert not otlp_configured({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not otlp_configured({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert not otlp_configured({**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",  # an all-zero trace id
        "00-" + "a" * 32 + "-" + "0" * 16 + "-01",  # an all-zero span id
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01-extra",
        "00-" + "a" * 32 + "-" + "b" * 16 + "-01" + " " * 200,
        "00-" + "g" * 32 + "-" + "b" * 16 + "-01",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(header: str) -> None:
    assert tracing.TraceContext.parse(header) is None
    with tracing.attached(header) as context:
        assert context is None  # nothing current: a span here starts its own trace


def test_a_malformed_remote_span_is_dropped() -> None:
    kept: list[tracing.Span] = []

    class Keep:
        def export(self, span: tracing.Span) -> None:
            kept.append(span)

    sink = Keep()
    tracing.add_exporter(sink, remote=True)
    try:
        tracing.record_remote({"name": "chat x", "trace_id": "../../etc", "span_id": "1"})
        good = tracing.start_span("chat x")
        good.end_ns = good.start_ns + 1
        tracing.record_remote(tracing.span_data(good))
    finally:
        tracing.remove_exporter(sink)
    assert [s.span_id for s in kept] == [good.span_id]
