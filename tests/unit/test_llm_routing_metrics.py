"""The affinity policy (pure), the conversation key, the route log, and the engine metrics'
arithmetic over vLLM's stats records (no Ray started, no engine)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from serving.llm_client import conversation_key
from serving.llm_metrics import EngineMetrics, EngineTotals, step_stats
from serving.llm_routes import InFlight, RouteLog
from serving.llm_routing import affinity_ranks
from tests.conftest import async_wait_for

REPLICAS = ["a", "b", "c"]


@pytest.mark.parametrize(
    ("preferred", "loads", "expected"),
    [
        ("b", {"b": 3}, [["b"], ["a", "c"]]),  # not overloaded: stay, the rest as fallback
        ("b", {}, [["b"], ["a", "c"]]),  # load unknown yet: try it (the router probes it)
        ("b", {"a": 9, "b": 8, "c": 2}, [["c"], REPLICAS]),  # overloaded: a lighter one first
        ("b", {"a": 9, "b": 8}, [["c"], REPLICAS]),  # c's load unknown: it may be lighter
        ("b", {"a": 9, "b": 8, "c": 12}, [REPLICAS]),  # all busier: least loaded of all
        ("gone", {"gone": 0}, [REPLICAS]),  # the replica left: least loaded of all
        (None, {}, [REPLICAS]),  # no conversation key
    ],
)
def test_affinity_ranks(
    preferred: str | None, loads: dict[str, int], expected: list[list[str]]
) -> None:
    assert affinity_ranks(preferred, loads, 8, REPLICAS) == expected


def test_affinity_ranks_with_one_replica_and_none() -> None:
    assert affinity_ranks("a", {"a": 0}, 8, ["a"]) == [["a"]]
    assert affinity_ranks("a", {"a": 9}, 8, ["a"]) == [["a"]]
    assert affinity_ranks("a", {}, 8, []) == []


def test_route_log_is_bounded_and_keeps_the_latest() -> None:
    log = RouteLog(capacity=2)
    log.record("c1", "r1")
    log.record("c2", "r1")
    log.record("c1", "r2")
    log.record("c3", "r2")
    assert (log.get("c1"), log.get("c2"), log.get("c3")) == ("r2", None, "r2")


def test_conversation_key_follows_the_first_user_message() -> None:
    turn1 = {"model": "m", "messages": [{"role": "system", "content": "S"}, user("hello")]}
    turn2 = {**turn1, "messages": [*turn1["messages"], assistant("hi"), user("more")]}
    chooser = {
        **turn2,
        "messages": [{"role": "system", "content": "S + tools"}, *turn2["messages"][1:]],
    }
    assert conversation_key(turn1) == conversation_key(turn2) == conversation_key(chooser)
    assert conversation_key({**turn1, "messages": [user("another")]}) != conversation_key(turn1)
    assert conversation_key({**turn1, "model": "other"}) != conversation_key(turn1)
    assert conversation_key({**turn1, "prompt_cache_key": "conv-1"}) == "conv-1"
    assert conversation_key({"messages": [{"role": "system", "content": "S"}]}) is None


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# --------------------------------------------------------------------------- engine metrics


@dataclass
class PrefixStats:
    queries: int = 0
    hits: int = 0


@dataclass
class SchedulerStats:  # the fields of vllm.v1.metrics.stats.SchedulerStats that are read
    num_waiting_reqs: int = 0
    num_running_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: PrefixStats = field(default_factory=PrefixStats)


@dataclass
class IterationStats:
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_engine_metrics_accumulate_vllm_stats() -> None:
    totals, clock = EngineTotals(), Clock()
    logger = EngineMetrics(totals, None, clock)
    logger.record(SchedulerStats(2, 1, 0.25, PrefixStats(100, 0)), IterationStats(100, 1))
    logger.record(SchedulerStats(0, 3, 0.5, PrefixStats(120, 96)), IterationStats(120, 3))
    logger.record(None, IterationStats(0, 3))
    assert (totals.waiting, totals.running, totals.kv_cache_usage) == (0, 3, 0.5)
    assert (totals.prompt_tokens, totals.generation_tokens) == (220, 7)
    assert totals.prefix_cache_hit_rate == pytest.approx(96 / 220)
    clock.now += 2.0
    logger.log()
    assert totals.generation_tokens_per_s == pytest.approx(3.5)
    snapshot = totals.snapshot()
    assert snapshot["prefix_cache_hits"] == 96 and "prefix_cache_hit_rate" in snapshot


def test_step_stats_without_scheduler_stats_keeps_the_gauges() -> None:
    step = step_stats(None, IterationStats(5, 2))
    assert step.waiting is None and (step.prompt_tokens, step.generation_tokens) == (5, 2)


def test_in_flight_counts_each_request_once_where_it_went() -> None:
    counts = InFlight()
    counts.started("r1", "a")
    counts.started("r2", "a")
    counts.started("r2", "b")  # r2 was rejected by a and routed again to b
    assert (counts.count("a"), counts.count("b")) == (1, 1)
    counts.finished("r1")
    counts.finished("r2")
    counts.finished("r2")  # a late second completion changes nothing
    assert (counts.count("a"), counts.count("b")) == (0, 0)


class LoggingEngine:
    """Stands in for vLLM's ``AsyncLLM``: counts ``do_log_stats`` calls; the first one fails."""

    def __init__(self) -> None:
        self.logged = 0

    async def do_log_stats(self) -> None:
        self.logged += 1
        if self.logged == 1:
            raise RuntimeError("a stats failure")

    def shutdown(self) -> None:
        return None


async def test_the_local_engine_has_its_stat_loggers_log_periodically() -> None:
    """vLLM only computes rates (the tokens/s gauge, its throughput line) when told to log;
    ``vllm serve``'s server does it on a timer, and so does the replica's engine."""
    from serving.llm import EngineSpec, LocalEngine

    engine = LoggingEngine()
    local = LocalEngine(engine, None, EngineSpec(model_dir="m", served_names=("m",)))
    local.log_stats_every(0.01)
    await async_wait_for(lambda: engine.logged >= 3, timeout=5)  # past the failing one
    local.shutdown()
    await asyncio.sleep(0.05)
    stopped_at = engine.logged
    await asyncio.sleep(0.05)
    assert engine.logged == stopped_at
