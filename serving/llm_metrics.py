"""vLLM's own engine statistics, re-exported as Ray metrics with the deployment and replica.

vLLM reports, after every engine step, its scheduler state (requests waiting and running, KV-cache
usage, prefix-cache queries and hits) and what the step produced (prompt and generated tokens).
``EngineMetrics`` is a vLLM stat logger (``AsyncLLM(stat_loggers=[...])``, duck-typed so that
importing this module does not import vLLM) that keeps running totals and sets Ray metrics
(``ray.util.metrics``: exported by every node's metrics agent to Prometheus, shown in the Ray
dashboard) tagged ``deployment``, ``replica`` and ``model``:

=====================================  ========  ===============================================
metric                                 kind      meaning
=====================================  ========  ===============================================
``wonder_llm_queue_length``            gauge     requests waiting for the engine
``wonder_llm_running_requests``        gauge     requests being decoded
``wonder_llm_kv_cache_usage``          gauge     fraction of KV-cache blocks in use (0-1)
``wonder_llm_generation_tokens_per_s`` gauge     generated tokens per second since the last log
``wonder_llm_prompt_tokens``           counter   prompt tokens prefilled
``wonder_llm_generation_tokens``       counter   tokens generated
``wonder_llm_prefix_cache_queries``    counter   prompt tokens looked up in the prefix cache
``wonder_llm_prefix_cache_hits``       counter   of those, tokens found (hit rate = hits/queries)
=====================================  ========  ===============================================
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

TAG_KEYS = ("deployment", "replica", "model")


@dataclass
class EngineTotals:
    """The latest scheduler state and running token counts of one engine (pure)."""

    waiting: int = 0
    running: int = 0
    kv_cache_usage: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    generation_tokens_per_s: float = 0.0

    @property
    def prefix_cache_hit_rate(self) -> float:
        queries = self.prefix_cache_queries
        return self.prefix_cache_hits / queries if queries else 0.0

    def snapshot(self) -> dict[str, float]:
        return {**asdict(self), "prefix_cache_hit_rate": self.prefix_cache_hit_rate}


@dataclass(frozen=True)
class StepStats:
    """What one vLLM stats record adds (read from ``SchedulerStats``/``IterationStats``)."""

    waiting: int | None = None  # None: no scheduler stats in this record
    running: int = 0
    kv_cache_usage: float = 0.0
    prefix_queries: int = 0
    prefix_hits: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0


def step_stats(scheduler_stats: Any, iteration_stats: Any) -> StepStats:
    """Read the fields Wonder exports from vLLM's stats objects (either may be None)."""
    fields: dict[str, Any] = {}
    if scheduler_stats is not None:
        prefix = scheduler_stats.prefix_cache_stats
        fields |= {
            "waiting": scheduler_stats.num_waiting_reqs,
            "running": scheduler_stats.num_running_reqs,
            "kv_cache_usage": scheduler_stats.kv_cache_usage,
            "prefix_queries": prefix.queries,
            "prefix_hits": prefix.hits,
        }
    if iteration_stats is not None:
        fields |= {
            "prompt_tokens": iteration_stats.num_prompt_tokens,
            "generation_tokens": iteration_stats.num_generation_tokens,
        }
    return StepStats(**fields)


def apply(totals: EngineTotals, step: StepStats) -> EngineTotals:
    """``totals`` after ``step`` (in place, returned for chaining)."""
    if step.waiting is not None:
        totals.waiting = step.waiting
        totals.running = step.running
        totals.kv_cache_usage = step.kv_cache_usage
    totals.prompt_tokens += step.prompt_tokens
    totals.generation_tokens += step.generation_tokens
    totals.prefix_cache_queries += step.prefix_queries
    totals.prefix_cache_hits += step.prefix_hits
    return totals


class RayEngineMetrics:
    """The Ray metrics of one replica's engine (created inside the replica)."""

    def __init__(self, tags: dict[str, str]) -> None:
        from ray.util.metrics import Counter, Gauge

        def gauge(name: str, description: str) -> Gauge:
            metric = Gauge(name, description=description, tag_keys=TAG_KEYS)
            metric.set_default_tags(tags)
            return metric

        def counter(name: str, description: str) -> Counter:
            metric = Counter(name, description=description, tag_keys=TAG_KEYS)
            metric.set_default_tags(tags)
            return metric

        self.queue_length = gauge("wonder_llm_queue_length", "Requests waiting for the engine")
        self.running = gauge("wonder_llm_running_requests", "Requests being decoded")
        self.kv_cache_usage = gauge("wonder_llm_kv_cache_usage", "KV-cache blocks in use (0-1)")
        self.tokens_per_s = gauge("wonder_llm_generation_tokens_per_s", "Generated tokens/s")
        self.prompt_tokens = counter("wonder_llm_prompt_tokens", "Prompt tokens prefilled")
        self.generation_tokens = counter("wonder_llm_generation_tokens", "Tokens generated")
        self.prefix_queries = counter(
            "wonder_llm_prefix_cache_queries", "Prompt tokens looked up in the prefix cache"
        )
        self.prefix_hits = counter(
            "wonder_llm_prefix_cache_hits", "Prompt tokens found in the prefix cache"
        )

    def export(self, step: StepStats, totals: EngineTotals) -> None:
        if step.waiting is not None:
            self.queue_length.set(totals.waiting)
            self.running.set(totals.running)
            self.kv_cache_usage.set(totals.kv_cache_usage)
        for counter, value in (
            (self.prompt_tokens, step.prompt_tokens),
            (self.generation_tokens, step.generation_tokens),
            (self.prefix_queries, step.prefix_queries),
            (self.prefix_hits, step.prefix_hits),
        ):
            if value:
                counter.inc(value)


class EngineMetrics:
    """A vLLM per-engine stat logger: totals for ``engine_stats()`` plus Ray metrics."""

    def __init__(
        self,
        totals: EngineTotals,
        metrics: RayEngineMetrics | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.totals = totals
        self.metrics = metrics
        self._clock = clock
        self._last_log = (clock(), totals.generation_tokens)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        step = step_stats(scheduler_stats, iteration_stats)
        apply(self.totals, step)
        if self.metrics is not None:
            self.metrics.export(step, self.totals)

    def log(self) -> None:
        """Called by vLLM every few seconds: the generation rate since the previous call."""
        now, tokens = self._clock(), self.totals.generation_tokens
        then, before = self._last_log
        if now > then:
            self.totals.generation_tokens_per_s = (tokens - before) / (now - then)
            if self.metrics is not None:
                self.metrics.tokens_per_s.set(self.totals.generation_tokens_per_s)
        self._last_log = (now, tokens)

    def log_engine_initialized(self) -> None:
        return None

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        return None


def stat_logger_factory(
    totals: EngineTotals, tags: dict[str, str] | None
) -> Callable[[Any, int], EngineMetrics]:
    """What ``AsyncLLM(stat_loggers=[...])`` takes; ``tags`` None: totals only, no Ray metrics."""

    def build(_vllm_config: Any, _engine_index: int = 0) -> EngineMetrics:
        return EngineMetrics(totals, RayEngineMetrics(tags) if tags is not None else None)

    return build
