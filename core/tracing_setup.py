"""Turning span export on in a process, from the standard OpenTelemetry environment variables.

Export is on when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
with the http/protobuf protocol (the default; ``grpc`` is refused with a warning), and neither
``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` turns it off. Off, no
exporter is built and a finished span goes only to the store. ``otel_env`` lists the variables a
process hands on to the processes it starts (Ray runtime environments, the model replicas), so one
setting reaches every process of the cluster.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from core import tracing
from core.tracing import SpanExporter
from core.tracing_otlp import OtlpSpans

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
FORWARDED_PREFIXES = ("OTEL_EXPORTER_OTLP_", "OTEL_BSP_")
FORWARDED = (
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    tracing.CAPTURE_CONTENT_ENV,
)
DEFAULT_SERVICE = "wonder"
log = logging.getLogger("wonder.tracing")

_exporters: dict[str, SpanExporter] = {}


def otlp_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP export of traces."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    if not any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES):
        return False
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    if protocol.strip().lower() not in ("", "http/protobuf"):
        log.warning("OTLP export needs http/protobuf, not %r: traces are not exported", protocol)
        return False
    return True


def otel_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenTelemetry variables of ``env`` (default: this process's) to hand on."""
    env = os.environ if env is None else env
    return {
        name: value
        for name, value in env.items()
        if name in FORWARDED or name.startswith(FORWARDED_PREFIXES)
    }


def start_export(process: str) -> SpanExporter | None:
    """Name this process in its spans and, when configured, export them over OTLP (once per
    process; later calls only rename)."""
    tracing.set_process(process)
    if not otlp_configured():
        return None
    key = "otlp"
    if key not in _exporters:
        service = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
        _exporters[key] = OtlpSpans(service)
        tracing.add_exporter(_exporters[key])
    return _exporters[key]


def flush_export(timeout_s: float = 10.0) -> None:
    """Send what the OTLP exporter still holds (tests, and a process about to exit)."""
    for exporter in _exporters.values():
        flush = getattr(exporter, "flush", None)
        if flush is not None:
            flush(timeout_s)
