"""Turning recording on in a process: where its model calls, spans and turn links go.

Each Wonder process that makes model calls or runs a turn's spans (a conversation actor, an
executor worker, a workflow coordinator, the gateway) calls ``install_recording`` once with its
store and settings (the wiring in ``cluster/`` does): records go to the store through one
background writer per store (``core.record_sink``), finished calls to the process's metrics, and
spans to OTLP as well when the standard settings ask for it (``core.tracing_setup``).
``WONDER_RECORD_MODEL_CALLS=false`` / ``WONDER_TRACING=false`` turn either off.
"""

from __future__ import annotations

import threading

from core import tracing
from core.llm import recording
from core.memory.objects import ObjectStore, open_object_store
from core.metrics import NO_METRICS, CallMetrics, Metrics
from core.record_sink import RecordLimits, RecordSink
from core.settings import Settings
from core.store import Store
from core.tracing_setup import start_export

_sinks: dict[int, RecordSink] = {}
_metrics: dict[int, CallMetrics] = {}
_lock = threading.Lock()


def install_recording(
    store: Store, settings: Settings, process: str, metrics: Metrics = NO_METRICS
) -> RecordSink | None:
    """Record this process's model calls, spans and turn links into ``store`` (idempotent);
    returns the background writer (None when both are turned off)."""
    start_export(process)
    if metrics is not NO_METRICS:
        with _lock:
            counted = _metrics.setdefault(id(metrics), CallMetrics(metrics))
        recording.add_call_sink(counted)
    if not (settings.record_model_calls or settings.tracing):
        return None
    sink = sink_for(store, settings)
    if settings.record_model_calls:
        recording.add_call_sink(sink)
    recording.add_link_sink(sink)
    if settings.tracing:
        tracing.add_exporter(sink, remote=True)
    return sink


def sink_for(store: Store, settings: Settings) -> RecordSink:
    """This process's background writer for ``store`` (one per store)."""
    with _lock:
        sink = _sinks.get(id(store))
        if sink is None:
            limits = RecordLimits(
                inline_max_bytes=settings.record_inline_max_bytes,
                retention_days=settings.record_retention_days,
            )

            def objects() -> ObjectStore:
                return open_object_store(settings.resolved_object_uri, settings.s3_endpoint_url)

            sink = _sinks[id(store)] = RecordSink(store, objects, limits)
        return sink


def uninstall_recording() -> None:
    """Stop recording in this process (tests that install it for a while)."""
    with _lock:
        sinks = list(_sinks.values())
        counters = list(_metrics.values())
        _sinks.clear()
        _metrics.clear()
    for sink in sinks:
        sink.flush(5.0)
        recording.remove_call_sink(sink)
        recording.remove_link_sink(sink)
        tracing.remove_exporter(sink)
    for counter in counters:
        recording.remove_call_sink(counter)


def flush_records(timeout_s: float = 10.0) -> None:
    """Wait until this process's queued records are written."""
    for sink in list(_sinks.values()):
        sink.flush(timeout_s)
