"""The model replica's side of a traced call: its own span, and what it reports back in-band.

A caller streaming a chat body through the deployment handle sends its ``chat`` span's W3C
``traceparent`` (``serving.llm_client``). The replica opens a ``chat {model}`` server span under
it, measures its own time to first chunk and reads the engine's usage, and ends the stream with
one extra payload, ``{"wonder": {deployment, replica, span}}``: the caller records who served the
call, and keeps the replica's span in its own records (``core.tracing.record_remote``), so a
turn's span tree holds the replica's span without a tracing backend. The span is also exported
from this process over OTLP when the standard settings are present.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from core import tracing
from core.jsontypes import JsonObject
from core.tracing import Span, SpanKind, TraceContext
from core.tracing_setup import start_export

PROCESS = "llm"


def start_replica_tracing() -> None:
    """Name this process in its spans and export them when configured (replica start)."""
    start_export(PROCESS)


class ReplicaCall:
    """One ``chat_stream`` call as this replica served it."""

    def __init__(
        self, deployment: str, replica: str, body: JsonObject, traceparent: str | None
    ) -> None:
        self.deployment = deployment
        self.replica = replica
        self.started = time.perf_counter()
        self.first_chunk_s: float | None = None
        self.usage: JsonObject = {}
        self.response_model: str | None = None
        parent = TraceContext.parse(traceparent)
        self.span: Span | None = None
        if parent is not None:
            model = str(body.get("model") or "")
            self.span = tracing.start_span(f"chat {model}", kind=SpanKind.SERVER, parent=parent)
            self.span.update(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "vllm",
                    "gen_ai.request.model": model,
                    "gen_ai.request.max_tokens": _integer(body.get("max_tokens")),
                    "wonder.deployment": deployment,
                    "wonder.replica": replica,
                }
            )

    async def observe(self, payloads: AsyncIterator[str]) -> AsyncIterator[str]:
        """The engine's payloads, unchanged; the first one's time and the usage noted."""
        async for payload in payloads:
            if self.first_chunk_s is None:
                self.first_chunk_s = time.perf_counter() - self.started
            if '"usage"' in payload:  # only the usage chunk is parsed
                self._note(payload)
            yield payload

    def _note(self, payload: str) -> None:
        try:
            data = json.loads(payload)
        except ValueError:
            return
        if isinstance(data, dict):
            usage = data.get("usage")
            if isinstance(usage, dict):
                self.usage = usage
            if isinstance(data.get("model"), str):
                self.response_model = data["model"]

    def report(self) -> str:
        """The last payload of the stream: who served the call, and this replica's span."""
        report: JsonObject = {"deployment": self.deployment, "replica": self.replica}
        if self.span is not None:
            self.span.update(
                {
                    "gen_ai.response.model": self.response_model,
                    "gen_ai.usage.input_tokens": _integer(self.usage.get("prompt_tokens")),
                    "gen_ai.usage.output_tokens": _integer(self.usage.get("completion_tokens")),
                    "gen_ai.response.time_to_first_chunk": None
                    if self.first_chunk_s is None
                    else round(self.first_chunk_s, 6),
                }
            )
            self.span.end()
            report["span"] = tracing.span_data(self.span)
        return json.dumps({"wonder": report})

    def failed(self, exc: BaseException) -> None:
        if self.span is not None and self.span.end_ns is None:
            self.span.fail(tracing.error_type_of(exc), str(exc))
            self.span.end()


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
