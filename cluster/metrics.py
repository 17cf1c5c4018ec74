"""``Metrics`` on Ray: ``ray.util.metrics`` counters, histograms and gauges.

Each process creates the metric objects once (``ray_metrics()``); Ray exports them from the node
the process runs on, at that node's ``--metrics-export-port``, in Prometheus format (names get the
``ray_`` prefix, counters ``_total``), every ``metrics_report_interval_ms`` (10 s by default);
the dashboard's Grafana panels and ``deploy/grafana-dashboard.json`` read them. Labels are
bounded: turn outcome and a failure reason's first word, never ids.

Ray's metrics agent forgets a gauge value that has not been set again for two report intervals
(its TTL for series of dead workers), so a gauge set once would vanish from the endpoint after
about 20 s: this process sets its gauges' last values again every ``GAUGE_REFRESH_S``
(tests/cluster/test_metrics.py).
"""

from __future__ import annotations

import functools
import threading
import time

from ray.util.metrics import Counter, Gauge, Histogram

from core.metrics import CallMeasure

LATENCY_BOUNDARIES_S = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300]
GAUGE_REFRESH_S = 5.0


class _RefreshedGauges:
    """Gauges whose last values are set again every ``GAUGE_REFRESH_S`` (a daemon thread)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[Gauge, float]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def set(self, name: str, gauge: Gauge, value: float) -> None:
        gauge.set(value)
        with self._lock:
            self._last[name] = (gauge, value)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._refresh, name="wonder-gauges", daemon=True
                )
                self._thread.start()

    def _refresh(self) -> None:
        while True:
            time.sleep(GAUGE_REFRESH_S)
            with self._lock:
                last = list(self._last.values())
            for gauge, value in last:
                gauge.set(value)


class RayMetrics:
    """Wonder's measurements as Ray metrics (one instance per process)."""

    def __init__(self) -> None:
        self._turns_started = Counter("wonder_turns_started", "Turns started")
        self._turns_ended = Counter(
            "wonder_turns_ended",
            "Turns ended, by outcome (completed|failed) and failure reason",
            tag_keys=("outcome", "reason"),
        )
        self._turn_latency = Histogram(
            "wonder_turn_latency_seconds",
            "From turn.started to turn.completed/failed",
            boundaries=LATENCY_BOUNDARIES_S,
            tag_keys=("outcome",),
        )
        self._first_token = Histogram(
            "wonder_first_token_latency_seconds",
            "From turn.started to the turn's first streamed token",
            boundaries=LATENCY_BOUNDARIES_S,
        )
        self._tokens = Counter("wonder_tokens_streamed", "Token deltas streamed to subscribers")
        self._resident = Gauge("wonder_resident_conversations", "Resident conversation actors")
        self._activating = Gauge(
            "wonder_activating_conversations", "Conversation activations in progress"
        )
        self._activations = Counter("wonder_conversation_activations", "Actors activated")
        self._evictions = Counter("wonder_conversation_evictions", "Actors evicted to make room")
        self._workflow_runs = Counter("wonder_workflow_runs_started", "Workflow runs launched")
        self._pending = Gauge("wonder_pending_async_operations", "Async operations running")
        self._memory_search = Histogram(
            "wonder_memory_search_latency_seconds",
            "memory.search, embedding included",
            boundaries=[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
        )
        self._model_calls = Counter(
            "wonder_model_calls",
            "Model calls (each request sent), by client, agent, model and outcome (ok|error)",
            tag_keys=("client", "agent", "model", "outcome"),
        )
        self._model_tokens = Counter(
            "wonder_model_tokens",
            "Model tokens, by client, agent, model and kind (prompt|completion)",
            tag_keys=("client", "agent", "model", "kind"),
        )
        self._model_cost = Counter(
            "wonder_model_cost",
            "Estimated model cost (the profiles' prices), by client, agent and model",
            tag_keys=("client", "agent", "model"),
        )
        self._model_retries = Counter(
            "wonder_model_retries",
            "Model calls retried (the LLM retry policy)",
            tag_keys=("agent",),
        )
        self._tool_failures = Counter(
            "wonder_tool_failures",
            "Tool calls that failed, by agent, tool and error code",
            tag_keys=("agent", "tool", "code"),
        )
        self._hook_failures = Counter(
            "wonder_hook_failures",
            "Context assembly and memory extraction hooks that failed after their retries",
            tag_keys=("agent", "hook"),
        )
        self._workflow_runs_ended = Counter(
            "wonder_workflow_runs_ended",
            "Workflow runs ended, by workflow and outcome (completed|failed|cancelled)",
            tag_keys=("workflow", "outcome"),
        )
        self._gauges = _RefreshedGauges()

    def turn_started(self) -> None:
        self._turns_started.inc()

    def turn_ended(self, outcome: str, reason: str, latency_s: float | None) -> None:
        self._turns_ended.inc(tags={"outcome": outcome, "reason": reason or "none"})
        if latency_s is not None:
            self._turn_latency.observe(latency_s, tags={"outcome": outcome})

    def first_token(self, latency_s: float) -> None:
        self._first_token.observe(latency_s)

    def tokens_streamed(self, count: int) -> None:
        self._tokens.inc(count)

    def resident_conversations(self, resident: int, activating: int) -> None:
        self._gauges.set("resident", self._resident, resident)
        self._gauges.set("activating", self._activating, activating)

    def conversation_activated(self) -> None:
        self._activations.inc()

    def conversation_evicted(self) -> None:
        self._evictions.inc()

    def workflow_run_started(self) -> None:
        self._workflow_runs.inc()

    def pending_operations(self, count: int) -> None:
        self._gauges.set("pending", self._pending, count)

    def memory_search(self, latency_s: float) -> None:
        self._memory_search.observe(latency_s)

    def model_call(self, call: CallMeasure) -> None:
        tags = {"client": call.client, "agent": call.agent, "model": call.model}
        self._model_calls.inc(tags={**tags, "outcome": call.outcome})
        if call.prompt_tokens:
            self._model_tokens.inc(call.prompt_tokens, tags={**tags, "kind": "prompt"})
        if call.completion_tokens:
            self._model_tokens.inc(call.completion_tokens, tags={**tags, "kind": "completion"})
        if call.cost:
            self._model_cost.inc(call.cost, tags=tags)

    def model_retry(self, agent: str) -> None:
        self._model_retries.inc(tags={"agent": agent or "none"})

    def tool_failed(self, agent: str, tool: str, code: str) -> None:
        self._tool_failures.inc(tags={"agent": agent or "none", "tool": tool[:100], "code": code})

    def hook_failed(self, agent: str, hook: str) -> None:
        self._hook_failures.inc(tags={"agent": agent or "none", "hook": hook})

    def workflow_run_ended(self, workflow: str, outcome: str) -> None:
        self._workflow_runs_ended.inc(tags={"workflow": workflow[:100], "outcome": outcome})


@functools.cache
def ray_metrics() -> RayMetrics:
    """This process's metrics (created on first use, inside a Ray worker or driver)."""
    return RayMetrics()
