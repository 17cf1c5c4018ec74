"""The metrics port: what Wonder measures, without knowing where the numbers go.

Actors and the gateway are handed a ``Metrics`` (``NoMetrics`` by default and in tests; the Ray
implementation, ``cluster.metrics.RayMetrics``, exports them to the node's Prometheus endpoint and
the Ray dashboard). ``TurnMetrics`` turns a conversation's published events into turn
measurements, so the actor only has to show it what it publishes: turn starts, ends (by reason),
latency, first-token latency and streamed tokens all follow from the event stream.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.jsontypes import JsonObject
from core.model_calls import ModelCallRecord


class Metrics(Protocol):
    """Measurements of one process. Every method is cheap and never raises."""

    def turn_started(self) -> None: ...
    def turn_ended(self, outcome: str, reason: str, latency_s: float | None) -> None: ...
    def first_token(self, latency_s: float) -> None: ...
    def tokens_streamed(self, count: int) -> None: ...
    def resident_conversations(self, resident: int, activating: int) -> None: ...
    def conversation_activated(self) -> None: ...
    def conversation_evicted(self) -> None: ...
    def workflow_run_started(self) -> None: ...
    def pending_operations(self, count: int) -> None: ...
    def memory_search(self, latency_s: float) -> None: ...
    def model_call(self, call: CallMeasure) -> None: ...
    def model_retry(self, agent: str) -> None: ...
    def tool_failed(self, agent: str, tool: str, code: str) -> None: ...
    def hook_failed(self, agent: str, hook: str) -> None: ...
    def workflow_run_ended(self, workflow: str, outcome: str) -> None: ...


class NoMetrics:
    """Measures nothing (the default outside a Ray cluster)."""

    def turn_started(self) -> None:
        pass

    def turn_ended(self, outcome: str, reason: str, latency_s: float | None) -> None:
        pass

    def first_token(self, latency_s: float) -> None:
        pass

    def tokens_streamed(self, count: int) -> None:
        pass

    def resident_conversations(self, resident: int, activating: int) -> None:
        pass

    def conversation_activated(self) -> None:
        pass

    def conversation_evicted(self) -> None:
        pass

    def workflow_run_started(self) -> None:
        pass

    def pending_operations(self, count: int) -> None:
        pass

    def memory_search(self, latency_s: float) -> None:
        pass

    def model_call(self, call: CallMeasure) -> None:
        pass

    def model_retry(self, agent: str) -> None:
        pass

    def tool_failed(self, agent: str, tool: str, code: str) -> None:
        pass

    def hook_failed(self, agent: str, hook: str) -> None:
        pass

    def workflow_run_ended(self, workflow: str, outcome: str) -> None:
        pass


NO_METRICS: Metrics = NoMetrics()


@dataclass(frozen=True, slots=True)
class CallMeasure:
    """One finished model call, as the metrics count it (labels: ids of library objects and
    agents, bounded by what a deployment holds; never conversations or turns)."""

    client: str
    agent: str
    model: str
    outcome: str  # ok | error
    prompt_tokens: int
    completion_tokens: int
    cost: float


def call_measure(record: ModelCallRecord) -> CallMeasure:
    source = record.source
    return CallMeasure(
        client=source.client_id or "none",
        agent=source.agent_id or "none",
        model=f"{record.provider}/{record.model}"[:100],
        outcome=record.status,
        prompt_tokens=record.usage.prompt_tokens,
        completion_tokens=record.usage.completion_tokens,
        cost=record.cost or 0.0,
    )


class CallMetrics:
    """A ``core.llm.recording.CallSink`` that counts each finished model call."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def model_call(self, record: ModelCallRecord) -> None:
        self.metrics.model_call(call_measure(record))


# Turns whose start we remember (to time their end and first token); older ones are forgotten.
TRACKED_TURNS = 256


class TurnMetrics:
    """Turn measurements from a conversation's events (``{type, at, turn_id, ...}``).

    A turn's latency runs from its ``turn.started`` to its ``turn.completed``/``turn.failed``
    event; first-token latency from ``turn.started`` to its first ``token`` (token events carry
    no time: the clock is injected). Token deltas count as streamed tokens, one per delta.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._started: OrderedDict[str, datetime] = OrderedDict()
        self._first_token_seen: set[str] = set()

    def observe(self, event: JsonObject, now: datetime) -> None:
        """Measure one published event; ``now`` is when it was published."""
        kind = event.get("type")
        turn_id = event.get("turn_id")
        if not isinstance(turn_id, str):
            return
        if kind == "turn.started":
            self._start(turn_id, _at(event))
        elif kind in ("turn.completed", "turn.failed"):
            self._end(turn_id, kind, event)
        elif kind == "token":
            self.metrics.tokens_streamed(1)
            if turn_id in self._started and turn_id not in self._first_token_seen:
                self._first_token_seen.add(turn_id)
                self.metrics.first_token(_seconds(self._started[turn_id], now))

    def _start(self, turn_id: str, at: datetime | None) -> None:
        self.metrics.turn_started()
        if at is None:
            return
        self._started[turn_id] = at
        while len(self._started) > TRACKED_TURNS:
            forgotten, _ = self._started.popitem(last=False)
            self._first_token_seen.discard(forgotten)

    def _end(self, turn_id: str, kind: str, event: JsonObject) -> None:
        started = self._started.pop(turn_id, None)
        self._first_token_seen.discard(turn_id)
        at = _at(event)
        latency = _seconds(started, at) if started is not None and at is not None else None
        if kind == "turn.completed":
            self.metrics.turn_ended("completed", "", latency)
        else:
            reason = event.get("failure_reason") or event.get("reason") or "unknown"
            self.metrics.turn_ended("failed", _reason_label(str(reason)), latency)


def _at(event: JsonObject) -> datetime | None:
    value = event.get("at")
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def _reason_label(reason: str) -> str:
    """A bounded label value: the reason's first word (``llm_failed: ...`` → ``llm_failed``)."""
    head = reason.split(":", 1)[0].split()[0] if reason.strip() else "unknown"
    return head[:40]
