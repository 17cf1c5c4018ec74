"""The background writer of model call records, spans and turn links (one per process and store).

Whoever makes a call, runs a span or causes something a turn links to only queues it (a list
append under a lock); a daemon thread writes what is queued in one transaction every
``flush_interval_s``, so recording adds no store round trip to a turn's path. A request or
response larger than ``inline_max_bytes`` goes to the object store first (``model-calls/<day>/
<call id>/request.json``) and the row keeps its key. Once an hour the thread deletes what is older
than the retention (rows, and the objects they name).

What is queued is observability, not acknowledged data: a process killed between two flushes
loses at most its last interval's records, never a conversation's messages. A full queue drops
new records (and says so in the log) rather than hold a turn.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from core.errors import WonderError
from core.ids import utc_now
from core.memory.objects import ObjectStore
from core.model_calls import ModelCallRecord, ModelResponse, TurnLink
from core.store import Store
from core.trace_records import span_record
from core.tracing import Span

log = logging.getLogger("wonder.recording")
T = TypeVar("T")

PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True, slots=True)
class RecordLimits:
    inline_max_bytes: int = 32_768
    retention_days: int = 30
    flush_interval_s: float = 0.2
    max_queued: int = 20_000


class RecordSink:
    """``CallSink``, ``LinkSink`` and ``SpanExporter`` over the store (module doc)."""

    def __init__(
        self,
        store: Store,
        objects: Callable[[], ObjectStore] | None = None,
        limits: RecordLimits | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or RecordLimits()
        self._objects_factory = objects
        self._objects: ObjectStore | None = None
        self._calls: list[ModelCallRecord] = []
        self._spans: list[Span] = []
        self._links: list[TurnLink] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._dropped = 0
        self._last_prune = 0.0
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ queueing

    def model_call(self, record: ModelCallRecord) -> None:
        self._queue(self._calls, record)

    def export(self, span: Span) -> None:
        self._queue(self._spans, span)

    def turn_link(self, link: TurnLink) -> None:
        self._queue(self._links, link)

    def _queue(self, queue: list[T], item: T) -> None:
        with self._lock:
            if len(self._calls) + len(self._spans) + len(self._links) >= self.limits.max_queued:
                self._dropped += 1
                if self._dropped in (1, 100, 10_000):
                    log.warning("recording queue full: %d records dropped", self._dropped)
                return
            queue.append(item)
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wonder-records", daemon=True
                )
                self._thread.start()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is written (tests, shutdown)."""
        self._wake.set()
        return self._idle.wait(timeout_s)

    # ------------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        while True:
            self._wake.wait(self.limits.flush_interval_s)
            self._wake.clear()
            with self._lock:
                calls, spans, links = self._calls, self._spans, self._links
                self._calls, self._spans, self._links = [], [], []
            if calls or spans or links:
                self._write(calls, spans, links)
            with self._lock:
                if not (self._calls or self._spans or self._links):
                    self._idle.set()
            if time.monotonic() - self._last_prune > PRUNE_EVERY_S:
                self._last_prune = time.monotonic()
                self._prune(utc_now())

    def _write(
        self, calls: list[ModelCallRecord], spans: list[Span], links: list[TurnLink]
    ) -> None:
        try:
            rows = [self._offloaded(call) for call in calls]
            records = [span_record(span) for span in spans]
            with self.store.db.begin() as conn:
                self.store.records.insert_calls(rows, conn)
                self.store.records.insert_spans(records, conn)
                self.store.records.insert_links(links, conn)
        except Exception:  # observability never takes a process down; the next batch may pass
            log.exception(
                "could not write %d model calls, %d spans, %d links",
                len(calls),
                len(spans),
                len(links),
            )

    def _offloaded(self, record: ModelCallRecord) -> ModelCallRecord:
        """The record with a large request or response moved to the object store."""
        request = json.dumps(record.request, separators=(",", ":")).encode()
        update: dict[str, object] = {"request_bytes": len(request)}
        limit = self.limits.inline_max_bytes
        day = record.created_at.strftime("%Y-%m-%d")
        if len(request) > limit and self._object_store() is not None:
            key = f"model-calls/{day}/{record.id}/request.json"
            self._put(key, request)
            update.update(request=None, request_ref=key)
        if record.response is not None:
            response = record.response.model_dump_json().encode()
            if len(response) > limit and self._object_store() is not None:
                key = f"model-calls/{day}/{record.id}/response.json"
                self._put(key, response)
                update.update(response=None, response_ref=key)
        return record.model_copy(update=update)

    def _object_store(self) -> ObjectStore | None:
        if self._objects is None and self._objects_factory is not None:
            self._objects = self._objects_factory()
        return self._objects

    def _put(self, key: str, data: bytes) -> None:
        objects = self._object_store()
        if objects is not None:
            objects.put(key, data)

    def _prune(self, now: datetime) -> None:
        days = self.limits.retention_days
        if days <= 0:
            return
        before = now - timedelta(days=days)
        try:
            objects = self._object_store()
            if objects is not None:
                for key in self.store.records.expired_refs(before, limit=10_000):
                    objects.delete(key)
            calls, spans = self.store.records.prune(before)
            if calls or spans:
                log.info("retention: deleted %d model calls and %d spans", calls, spans)
        except (WonderError, OSError):
            log.exception("retention pruning failed; trying again in an hour")


def load_bodies(record: ModelCallRecord, objects: ObjectStore | None) -> ModelCallRecord:
    """The record with the bodies kept in the object store read back (when they still are)."""
    if objects is None or (record.request_ref is None and record.response_ref is None):
        return record
    update: dict[str, object] = {}
    try:
        if record.request_ref is not None:
            update["request"] = json.loads(objects.get(record.request_ref))
        if record.response_ref is not None:
            update["response"] = ModelResponse.model_validate_json(objects.get(record.response_ref))
    except WonderError:
        return record  # deleted by retention meanwhile: the row says where it was
    return record.model_copy(update=update)
