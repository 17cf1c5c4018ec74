"""The model at cluster scale, for real on CPU, on the session's LLM application (``llm_app``).

Its second model profile is its own deployment, autoscaled between 1 and 2 replicas (target 2
ongoing requests, upscale at once, downscale 5 s after the load drops; tests/e2e/conftest.py).
One burst, recorded once by the module fixture ``burst`` and checked by two tests, takes it from
one replica to two and back:

1. **burst**: four streams at a time, each re-opened as it ends, until a second replica is running
   (its engine starts on the two cores the first one decodes on: one to three minutes here);
2. conversations are found whose router picks each replica (tiny probe requests): one keeps a
   stream open on the first replica, two keep streams open on the second, each a chain of streams
   one after the other, the second replica's two half a stream apart (so one of them always has
   half its tokens to go);
3. **affinity**, at two replicas: four conversations take three turns each (the chains keep the
   load above the target, so the deployment stays at two);
4. **back to one**: the first replica's chain stops; the load is the second replica's two streams
   (2 = the target for one replica): Serve removes a replica (the newest first), which stops taking
   requests and drains its open streams (graceful shutdown); the test checks that streams were
   open on it when it was seen stopping and that they ended with all their tokens.

Every stream asks for a fixed number of tokens with ``ignore_eos``: complete means vLLM's own count
of generated tokens is that number and the stream ended for ``length`` (a cut stream has no final
usage chunk). Replica states come from Serve's REST API (the dashboard); which replica served a
stream from the affinity router's route log (``last_route``) and its in-flight counts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.llm.protocol import ChatRequest, ModelFinished, TextDelta
from serving.llm_client import VllmHandleModel, conversation_key
from serving.llm_config import PRIMARY_DEPLOYMENT_NAME, deployment_name_for
from serving.llm_routing import in_flight, last_route
from tests.conftest import Cluster, async_wait_for, wait_for
from tests.e2e.conftest import LlmApp

pytestmark = pytest.mark.e2e

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 40}  # a long shared prefix
BURST_STREAMS = 4  # at once: twice the target, so the autoscaler asks for a second replica
BURST_TOKENS = 48
CHAIN_TOKENS = 96
DRAIN_TOKENS = 128  # the second replica's chains: one has ≥ 64 tokens (3-6 s) to go at any time
SCALE_TIMEOUT_S = 600.0  # a second engine's start on two loaded cores (75 to 200 s measured)


# --------------------------------------------------------------------------- streams


@dataclass
class Stream:
    """One streamed completion through the second model's deployment handle."""

    label: str
    session: str
    max_tokens: int
    started: float
    ended: float = 0.0
    replica: str | None = None  # where the router sent it (known once its first chunk arrived)
    completion_tokens: int = 0  # vLLM's count, from the final usage chunk
    finish_reason: str | None = None

    @property
    def complete(self) -> bool:
        return self.completion_tokens == self.max_tokens and self.finish_reason == "length"


async def stream(app: LlmApp, session: str, max_tokens: int, label: str) -> Stream:
    from ray import serve

    deployment = deployment_name_for(app.second_model)
    handle = serve.get_deployment_handle(deployment, app_name=app.app_name)
    handle = handle.options(stream=True, session_id=session)
    body = {
        "model": app.second_model,
        "messages": [{"role": "user", "content": f"Write the long chronicle of {session}."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # exactly max_tokens, unless the stream is cut
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    record = Stream(label, session, max_tokens, time.monotonic())
    async for batch in handle.chat_stream.remote(body):
        record.replica = record.replica or last_route(session)
        for payload in batch:
            chunk = json.loads(payload)
            assert "error" not in chunk, chunk
            for choice in chunk.get("choices") or []:
                record.finish_reason = choice.get("finish_reason") or record.finish_reason
            if chunk.get("usage"):
                record.completion_tokens = chunk["usage"]["completion_tokens"]
    record.ended = time.monotonic()
    return record


async def repeat(
    app: LlmApp,
    label: str,
    sessions: Iterator[str],
    max_tokens: int,
    stop: asyncio.Event,
    first_tokens: int | None = None,
) -> list[Stream]:
    """Streams one after the other (one always open) until ``stop`` is set; the first one asks
    for ``first_tokens`` (a chain started with a half stream stays half a stream behind another
    decoded beside it: the engine steps both a token at a time)."""
    done: list[Stream] = []
    tokens = first_tokens or max_tokens
    while not stop.is_set():
        done.append(await stream(app, next(sessions), tokens, label))
        tokens = max_tokens
    return done


def numbered(prefix: str) -> Iterator[str]:
    return (f"{prefix}-{n}" for n in itertools.count())


async def turn(model: VllmHandleModel, messages: list[dict[str, Any]]) -> str:
    # The model named as a profile names it (the affinity key digests it and the first message).
    request = ChatRequest(
        model=model.model, messages=messages, max_tokens=12, tool_calling="native"
    )
    chunks = [chunk async for chunk in model.stream(request)]
    assert isinstance(chunks[-1], ModelFinished)
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


# --------------------------------------------------------------------------- replica states


class ReplicaWatch:
    """Polls one deployment's replicas and their states (Serve's REST API on the dashboard) in a
    thread; notes when each replica was first seen stopping and how many of this process's
    requests were in flight on it then."""

    def __init__(self, dashboard_url: str, app: str, deployment: str) -> None:
        self._url = f"{dashboard_url}/api/serve/applications/"
        self._app, self._deployment = app, deployment
        self.t0 = time.monotonic()
        self.timeline: list[tuple[float, dict[str, str]]] = []  # (s, replica id → state)
        self.stopping: dict[str, tuple[float, int]] = {}  # replica → (seen at, in flight then)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-watch", daemon=True)

    def replicas(self) -> dict[str, str]:
        details = httpx.get(self._url, timeout=30, trust_env=False).json()
        deployment = details["applications"][self._app]["deployments"][self._deployment]
        return {r["replica_id"]: r["state"] for r in deployment["replicas"]}

    @property
    def now(self) -> dict[str, str]:
        return self.timeline[-1][1] if self.timeline else {}

    def running(self) -> set[str]:
        return {r for r, state in self.now.items() if state == "RUNNING"}

    def __enter__(self) -> ReplicaWatch:
        self.timeline.append((0.0, self.replicas()))
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                states = self.replicas()
            except (httpx.HTTPError, KeyError):  # the dashboard is slow on a loaded machine
                continue
            at = round(time.monotonic() - self.t0, 1)
            for replica, state in states.items():
                if state == "STOPPING" and replica not in self.stopping:
                    self.stopping[replica] = (time.monotonic(), in_flight(replica))
            if states != self.now:
                self.timeline.append((at, states))
                print(f"t={at} s: {states}", flush=True)


# --------------------------------------------------------------------------- the burst


@dataclass
class Burst:
    """What the burst did: streams, replica states, and the affinity turns taken at two."""

    first: str  # the replica before the burst
    second: str  # the replica the burst added
    streams: list[Stream] = field(default_factory=list)
    timeline: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    stopping: dict[str, tuple[float, int]] = field(default_factory=dict)
    at_end: dict[str, str] = field(default_factory=dict)
    routes: dict[str, list[str | None]] = field(default_factory=dict)  # conversation → per turn
    running_during_turns: tuple[set[str], set[str]] = (set(), set())  # before, after
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)  # conversation → its replica's
    took_s: float = 0.0


async def sessions_on(app: LlmApp, wanted: dict[str, int]) -> dict[str, list[str]]:
    """``wanted[replica]`` conversations (session ids) the router sends to each replica, found
    by probing (the ring picks a new session's replica): replica → sessions."""
    found: dict[str, list[str]] = {replica: [] for replica in wanted}
    for n, session in enumerate(numbered("probe")):
        probe = await stream(app, session, 1, "probe")
        assert probe.complete, probe
        if probe.replica in found and len(found[probe.replica]) < wanted[probe.replica]:
            found[probe.replica].append(session)
        if all(len(found[r]) == count for r, count in wanted.items()):
            return found
        assert n < 80, f"probes did not reach {wanted} ({found})"
    raise AssertionError("unreachable")


async def affinity_turns(app: LlmApp, burst: Burst) -> None:
    from ray import serve

    deployment = deployment_name_for(app.second_model)
    model = VllmHandleModel(app.second_model, app.app_name, deployment_name=deployment)
    for name in ("ada", "bob", "cy", "dee"):
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"I am {name}."}]
        key = conversation_key({"model": app.second_model, "messages": messages})
        assert key is not None
        for n in range(3):
            reply = await turn(model, messages)
            burst.routes.setdefault(key, []).append(last_route(key))
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"{n}?"},
            ]
        handle = serve.get_deployment_handle(deployment, app_name=app.app_name)
        burst.stats[key] = await handle.options(session_id=key).engine_stats.remote()


@pytest.fixture(scope="module")
async def burst(llm_app: LlmApp, ray_cluster: Cluster) -> AsyncIterator[Burst]:
    deployment = deployment_name_for(llm_app.second_model)
    started = time.monotonic()
    tasks: list[asyncio.Task[list[Stream]]] = []
    with ReplicaWatch(ray_cluster.dashboard_url, llm_app.app_name, deployment) as watch:
        try:
            record = await run_burst(llm_app, watch, tasks)
        except BaseException:  # no stream of a failed burst goes on into the next tests
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    record.took_s = time.monotonic() - started
    print(f"burst 1 → 2 → 1 replicas in {record.took_s:.1f} s, {len(record.streams)} streams")
    yield record


async def run_burst(
    app: LlmApp, watch: ReplicaWatch, tasks: list[asyncio.Task[list[Stream]]]
) -> Burst:
    (first,) = wait_for(watch.running, timeout=60)
    stop_burst = asyncio.Event()
    for i in range(BURST_STREAMS):
        burst = repeat(app, "burst", numbered(f"burst{i}"), BURST_TOKENS, stop_burst)
        tasks.append(asyncio.create_task(burst))
    added = await async_wait_for(
        lambda: watch.running() - {first}, timeout=SCALE_TIMEOUT_S, interval=0.5
    )
    (second,) = added
    stop_burst.set()
    record = Burst(first=first, second=second)
    homes = await sessions_on(app, {first: 1, second: 2})
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    (keep,), (drain_a, drain_b) = homes[first], homes[second]
    chains = [
        repeat(app, "chain@first", itertools.repeat(keep), CHAIN_TOKENS, stop_first),
        repeat(app, "chain@second", itertools.repeat(drain_a), DRAIN_TOKENS, stop_second),
        repeat(
            app,
            "chain@second",
            itertools.repeat(drain_b),
            DRAIN_TOKENS,
            stop_second,
            first_tokens=DRAIN_TOKENS // 2,
        ),
    ]
    tasks += [asyncio.create_task(chain) for chain in chains]
    before = watch.running()
    await affinity_turns(app, record)
    record.running_during_turns = (before, watch.running())
    # Now only the second replica's two streams: 2 ongoing requests, one replica's target.
    stop_first.set()
    await async_wait_for(lambda: watch.stopping, timeout=SCALE_TIMEOUT_S, interval=0.5)
    stop_second.set()
    for task in tasks:
        record.streams += await task
    await async_wait_for(lambda: len(watch.now) == 1 and watch.running(), timeout=SCALE_TIMEOUT_S)
    record.timeline, record.stopping, record.at_end = watch.timeline, watch.stopping, watch.now
    return record


async def test_a_burst_scales_one_to_two_replicas_and_back_without_cutting_a_stream(
    burst: Burst,
) -> None:
    states = [s for _, s in burst.timeline]
    assert max(sum(v == "RUNNING" for v in s.values()) for s in states) == 2, burst.timeline
    assert burst.at_end == {burst.first: "RUNNING"}, burst.timeline  # back to one, the first
    assert set(burst.stopping) == {burst.second}, burst.stopping
    seen_at, open_streams = burst.stopping[burst.second]
    # The replica was removed while streams of ours were open on it (its chains) ...
    assert open_streams >= 1, (burst.stopping, burst.timeline)
    drained = [s for s in burst.streams if s.replica == burst.second and s.ended > seen_at]
    assert drained, [(s.label, s.replica, s.ended - seen_at) for s in burst.streams]
    # ... and those streams, like every other, ended with all their tokens.
    cut = [s for s in burst.streams if not s.complete]
    assert not cut, cut
    by_replica: dict[str | None, int] = defaultdict(int)
    for s in burst.streams:
        by_replica[s.replica] += 1
    assert set(by_replica) == {burst.first, burst.second}, by_replica  # both replicas served


async def test_a_conversations_turns_land_on_one_replica(burst: Burst) -> None:
    before, after = burst.running_during_turns
    assert before == after == {burst.first, burst.second}  # the turns were taken at two replicas
    for key, replicas in burst.routes.items():
        assert replicas[0] is not None and replicas == [replicas[0]] * 3, burst.routes
        # The replica the router recorded is the one that answered, and its prefix cache hit.
        stats = burst.stats[key]
        assert stats["replica"] == replicas[0]
        assert stats["prefix_cache_hits"] > 0 and stats["generation_tokens"] > 0
    assert len(burst.routes) == 4


# --------------------------------------------------------------------------- two models


async def test_two_model_profiles_answer_from_two_deployments(
    llm_app: LlmApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray import serve

    assert llm_app.settings is not None
    # What an actor's runtime environment carries (Settings.env()): which deployment serves what.
    models = [m.model_dump() for m in llm_app.settings.llm_models]
    monkeypatch.setenv("WONDER_LLM_MODELS", json.dumps(models))
    app, second = llm_app.app_name, llm_app.second_model
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        listed = (await client.get(f"{llm_app.base_url}/models")).json()
    assert {second, "default"} <= {m["id"] for m in listed["data"]}

    question = [{"role": "user", "content": "Name a colour."}]
    # Its engine stats from the replica that answers it (the router keeps a key on one replica).
    key = conversation_key({"model": second, "messages": question})

    async def generated(deployment: str) -> int:
        handle = serve.get_deployment_handle(deployment, app_name=app).options(session_id=key)
        stats: dict[str, Any] = await handle.engine_stats.remote()
        return int(stats["generation_tokens"])

    primary, other = PRIMARY_DEPLOYMENT_NAME, deployment_name_for(second)
    before = await generated(primary), await generated(other)
    assert await turn(VllmHandleModel(model=second, app_name=app), question)  # handle, direct
    after_handle = await generated(primary), await generated(other)
    assert after_handle[0] == before[0] and after_handle[1] > before[1]

    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        body = {"model": second, "messages": question, "max_tokens": 8}
        answer = await client.post(f"{llm_app.base_url}/chat/completions", json=body)
        assert answer.status_code == 200, answer.text  # HTTP, forwarded by the primary
        assert answer.json()["model"] == second and await generated(other) > after_handle[1]
        body["model"] = "default"
        assert (await client.post(f"{llm_app.base_url}/chat/completions", json=body)).is_success
    assert await generated(primary) > before[0]


# --------------------------------------------------------------------------- engine metrics

GAUGES = (
    "ray_wonder_llm_queue_length",
    "ray_wonder_llm_running_requests",
    "ray_wonder_llm_kv_cache_usage",
    "ray_wonder_llm_generation_tokens_per_s",
)


Series = dict[str, list[tuple[dict[str, str], float]]]


def engine_series(metrics_url: str) -> Series:
    """The ``ray_wonder_llm_*`` samples on the node's Prometheus endpoint: name → samples."""
    text = httpx.get(metrics_url, timeout=30, trust_env=False).text
    found: Series = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ray_wonder_llm_"):
                found[sample.name].append((dict(sample.labels), sample.value))
    return found


async def test_engine_metrics_reach_the_nodes_metrics_endpoint(
    llm_app: LlmApp, ray_cluster: Cluster
) -> None:
    """vLLM's engine stats of each deployment's replica, exported by the node's metrics agent
    with the deployment, replica and model as labels."""
    from ray import serve

    served = {
        PRIMARY_DEPLOYMENT_NAME: llm_app.model,
        deployment_name_for(llm_app.second_model): llm_app.second_model,
    }
    stats: dict[str, dict[str, Any]] = {}
    for deployment, model in served.items():
        handle_model = VllmHandleModel(model, llm_app.app_name, deployment_name=deployment)
        assert await turn(handle_model, [{"role": "user", "content": "Count to five."}])
        handle = serve.get_deployment_handle(deployment, app_name=llm_app.app_name)
        stats[deployment] = await handle.engine_stats.remote()

    def labelled(series: Series, name: str, deployment: str) -> list[float]:
        wanted = {
            "deployment": deployment,
            "replica": stats[deployment]["replica"],
            "model": served[deployment],
        }
        return [
            value
            for labels, value in series.get(name, [])
            if all(labels.get(k) == v for k, v in wanted.items())
        ]

    def exported() -> Series | None:
        series = engine_series(ray_cluster.metrics_url)
        ready = all(
            sum(labelled(series, "ray_wonder_llm_generation_tokens_total", d))
            >= stats[d]["generation_tokens"]
            and all(labelled(series, g, d) for g in GAUGES)
            for d in served
        )
        return series if ready else None

    # One export interval of the metrics agent (10 s) after the request, with a margin.
    series = await asyncio.to_thread(wait_for, exported, 120, 2.0)
    for deployment in served:
        assert stats[deployment]["generation_tokens"] > 0
        assert (
            sum(labelled(series, "ray_wonder_llm_prompt_tokens_total", deployment))
            >= (stats[deployment]["prompt_tokens"])
        )
        (usage,) = labelled(series, "ray_wonder_llm_kv_cache_usage", deployment)
        assert 0.0 <= usage <= 1.0
