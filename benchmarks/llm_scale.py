"""The LLM at cluster scale: two replicas, conversation affinity, and autoscaling under a burst.

Run through ``benchmarks/llm_streaming.py --case replicas`` or ``--case autoscale`` (which start
their own local Ray and Serve, as the streaming benchmark does). Model calls go through the LLM
deployment's handle (``chat_stream``, what ``VllmHandleModel`` calls) so that vLLM's own usage
figures (``prompt_tokens_details.cached_tokens``: prompt tokens served from the prefix cache) come
back with every completion.

``replicas``
    1. one replica: aggregate tokens/s of ``--streams`` concurrent conversations;
    2. scaled in place to two replicas: the same load again (on one 2-core machine both replicas
       share the same cores, so expect no gain there; on a cluster each has its own GPU);
    3. prefix routing, same run, alternating: ``--conversations`` conversations with long
       distinct system prompts, ``--turns`` turns each, all conversations of a round at once,
       (a) **affinity**: the conversation key as the Serve session id (the router keeps a
       conversation on its replica), (b) **none**: a fresh session id per request (the replica
       is independent of the conversation, like Serve's default router). Per mode, over the
       turns after the first: vLLM's prefix-cache hit rate (cached ÷ prompt tokens) and TTFT.
``autoscale``
    min 1, max 2 replicas, ``target_ongoing_requests`` 2: a burst of long streams scales the
    deployment to two replicas (the burst outlasts the second replica's start); when it ends,
    two more long streams start and the deployment scales back to one while they run (graceful
    shutdown drains the removed replica's streams). Reports the replica timeline and
    whether every stream ended with all its tokens.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

APP = "llm"
FACTS = (
    "The archive holds maps of rivers, ledgers of grain, letters between merchants, and notes on "
    "the weather of each season. Every shelf is labelled by year and by the hand that wrote it. "
)


def progress(message: str) -> None:
    print(f"[llm_scale] {message}", flush=True)


@dataclass(frozen=True)
class Call:
    """One completion through the handle, as vLLM reported it."""

    ttft_s: float
    tokens: int  # content chunks received
    completion_tokens: int  # vLLM's count
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str | None
    replica: str | None


async def call(body: dict[str, Any], session: str | None) -> Call:
    from ray import serve

    from serving.llm_client import LLM_DEPLOYMENT_NAME
    from serving.llm_routing import last_route

    handle = serve.get_deployment_handle(LLM_DEPLOYMENT_NAME, app_name=APP).options(stream=True)
    if session:
        handle = handle.options(session_id=session)
    sent = time.perf_counter()
    first: float | None = None
    tokens = prompt = cached = completion = 0
    finish = None
    async for batch in handle.chat_stream.remote({**body, "stream": True}):
        for payload in batch:
            chunk = json.loads(payload)
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    first = first or time.perf_counter()
                    tokens += 1
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or {}
            prompt = usage.get("prompt_tokens") or prompt
            completion = usage.get("completion_tokens") or completion
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or cached
    replica = last_route(session) if session else None
    return Call((first or sent) - sent, tokens, completion, prompt, cached, finish, replica)


def body_for(messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "default",
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
        **extra,
    }


# --------------------------------------------------------------------------- replicas


async def throughput(streams: int, max_tokens: int, tag: str) -> dict[str, Any]:
    """``streams`` distinct conversations at once, each its own session."""
    from serving.llm_client import conversation_key

    bodies = [
        body_for([{"role": "user", "content": f"Tell a story about dragon {tag}-{i}."}], max_tokens)
        for i in range(streams)
    ]
    t0 = time.perf_counter()
    calls = await asyncio.gather(*(call(b, conversation_key(b)) for b in bodies))
    wall = time.perf_counter() - t0
    per_replica: dict[str, int] = {}
    for c in calls:
        per_replica[c.replica or "?"] = per_replica.get(c.replica or "?", 0) + 1
    return {
        "aggregate_tps": round(sum(c.completion_tokens for c in calls) / wall, 1),
        "ttft_ms_p50": round(statistics.median(c.ttft_s for c in calls) * 1000, 1),
        "conversations_per_replica": sorted(per_replica.values(), reverse=True),
    }


def system_prompt(mode: str, conversation: int) -> str:
    """Long and distinct per conversation and mode from the first token (no shared prefix)."""
    return f"Conversation {mode}-{conversation}. You are archivist number {conversation}. " + (
        FACTS * 6
    )


async def prefix_routing(conversations: int, turns: int, max_tokens: int) -> dict[str, Any]:
    from serving.llm_client import conversation_key

    histories = {
        mode: [
            [
                {"role": "system", "content": system_prompt(mode, i)},
                {"role": "user", "content": f"Hello, I am visitor {i}. What do you keep?"},
            ]
            for i in range(conversations)
        ]
        for mode in ("affinity", "none")
    }
    calls: dict[str, list[Call]] = {"affinity": [], "none": []}

    async def one(mode: str, messages: list[dict[str, str]]) -> Call:
        body = body_for(messages, max_tokens)
        session = conversation_key(body) if mode == "affinity" else f"r-{uuid.uuid4().hex}"
        result = await call(body, session)
        return result

    for turn in range(turns):
        order = ("affinity", "none") if turn % 2 == 0 else ("none", "affinity")
        for mode in order:
            results = await asyncio.gather(*(one(mode, h) for h in histories[mode]))
            for history, result in zip(histories[mode], results, strict=True):
                history += [
                    {"role": "assistant", "content": f"(answer {turn}, {result.tokens} tokens)"},
                    {"role": "user", "content": f"Tell me more about shelf {turn}."},
                ]
                if turn > 0:  # the first turn is cold in both modes
                    calls[mode].append(result)
            progress(f"turn {turn + 1}/{turns} {mode}: {describe(results)}")
    return {mode: describe(results) for mode, results in calls.items()}


def describe(calls: list[Call]) -> dict[str, Any]:
    prompt = sum(c.prompt_tokens for c in calls)
    return {
        "calls": len(calls),
        "prefix_cache_hit_rate": round(sum(c.cached_tokens for c in calls) / prompt, 3)
        if prompt
        else None,
        "ttft_ms_p50": round(statistics.median(c.ttft_s for c in calls) * 1000, 1),
        "ttft_ms_mean": round(statistics.fmean(c.ttft_s for c in calls) * 1000, 1),
    }


def run_replicas(args: Any, deploy: Callable[[dict[str, str]], float]) -> dict[str, Any]:
    out: dict[str, Any] = {"case": "replicas"}
    out["ready_1_s"] = round(deploy({"WONDER_LLM_NUM_REPLICAS": "1"}), 1)
    out["one_replica"] = asyncio.run(throughput(args.streams, args.max_tokens, "a"))
    progress(f"one replica: {out['one_replica']}")
    out["scale_to_2_s"] = round(deploy({"WONDER_LLM_NUM_REPLICAS": "2"}), 1)
    out["two_replicas"] = asyncio.run(throughput(args.streams, args.max_tokens, "b"))
    progress(f"two replicas: {out['two_replicas']}")
    routing = asyncio.run(prefix_routing(args.conversations, args.turns, args.prefix_max_tokens))
    out["prefix_routing"] = routing
    affinity, none = routing["affinity"], routing["none"]
    out["hit_rate_affinity"] = affinity["prefix_cache_hit_rate"]
    out["hit_rate_none"] = none["prefix_cache_hit_rate"]
    out["ttft_ratio_affinity_vs_none"] = round(affinity["ttft_ms_p50"] / none["ttft_ms_p50"], 3)
    return out


# --------------------------------------------------------------------------- autoscale


def alive_replicas() -> list[str]:
    """Unique ids of the LLM replicas whose actors are alive (a draining one included)."""
    import ray

    prefix = f"SERVE_REPLICA::{APP}#LLMServer#"
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    return sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix))


def replica_states() -> dict[str, int]:
    """Serve's view: replicas per state (RUNNING, STARTING, STOPPING, ...)."""
    from ray import serve

    deployments = serve.status().applications[APP].deployments
    return {str(k): int(v) for k, v in deployments["LLMServer"].replica_states.items()}


async def autoscale(args: Any) -> dict[str, Any]:
    timeline: list[tuple[float, dict[str, int]]] = []
    t0 = time.perf_counter()
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            states = await asyncio.to_thread(replica_states)
            if not timeline or timeline[-1][1] != states:
                timeline.append((round(time.perf_counter() - t0, 1), states))
                progress(f"t={timeline[-1][0]} s: {states}")
            await asyncio.sleep(1.0)

    def stream(i: int, tag: str, tokens: int) -> Any:
        content = f"Write a very long chronicle of kingdom {tag}-{i}."
        extra = {"ignore_eos": True, "min_tokens": tokens}  # exactly `tokens`, unless cut
        body = body_for([{"role": "user", "content": content}], tokens, **extra)
        return call(body, f"{tag}-{i}-{random.random()}")

    watcher = asyncio.create_task(watch())
    burst = asyncio.gather(*(stream(i, "burst", args.long_tokens) for i in range(args.burst)))
    burst_calls = await burst
    # Then a tail of two streams, below the target: the deployment scales back to one replica
    # while they are in flight (a replica being removed drains its streams).
    tail_start = round(time.perf_counter() - t0, 1)
    tail = await asyncio.gather(*(stream(i, "tail", args.tail_tokens) for i in range(2)))
    tail_end = round(time.perf_counter() - t0, 1)
    settle_until = time.perf_counter() + args.settle_s
    while replica_states() != {"RUNNING": 1} and time.perf_counter() < settle_until:
        await asyncio.sleep(1.0)
    stop.set()
    await watcher
    alive = alive_replicas()
    return {
        "case": "autoscale",
        "timeline_s_replicas": timeline,
        "max_running_replicas": max(states.get("RUNNING", 0) for _, states in timeline),
        "replicas_at_end": timeline[-1][1],
        "tail_start_s": tail_start,
        "tail_end_s": tail_end,
        "burst_complete": sum(complete(c, args.long_tokens) for c in burst_calls),
        "tail_complete": sum(complete(c, args.tail_tokens) for c in tail),
        "streams": len(burst_calls) + len(tail),
        "tail_on_removed_replica": sum(
            c.replica is not None and c.replica not in alive for c in tail
        ),
        "tail_replicas": [c.replica for c in tail],
        "alive_at_end": alive,
    }


def complete(result: Call, tokens: int) -> bool:
    """All ``tokens`` arrived and vLLM ended the stream for length (not cut, not aborted)."""
    return result.completion_tokens >= tokens and result.finish_reason == "length"


def autoscale_env(args: Any) -> dict[str, str]:
    return {
        "WONDER_LLM_MIN_REPLICAS": "1",
        "WONDER_LLM_MAX_REPLICAS": "2",
        "WONDER_LLM_TARGET_ONGOING_REQUESTS": "2",
        "WONDER_LLM_UPSCALE_DELAY_S": "0",
        "WONDER_LLM_DOWNSCALE_DELAY_S": str(args.downscale_delay_s),
        "WONDER_LLM_GRACEFUL_SHUTDOWN_S": "600",
    }
