"""Streaming the local model: decode tokens/s and time to first token, direct vs the whole path.

Starts its own local Ray (own temp dir, free ports), Serve, the LLM deployment (vLLM, real model,
CPU unless WONDER_LLM_DEVICE=cuda) and the gateway, then at 1, 8 and 16 concurrent streams measures
in the same run, alternating:

- **direct**: the deployment's OpenAI endpoint (``POST /llm/v1/chat/completions``, SSE) — vLLM
  plus Serve's HTTP proxy, the cost any OpenAI client pays;
- **handle**: the same prompt through ``VllmHandleModel`` from the driver (Serve deployment
  handle, no HTTP) — isolates the handle client from the actor and gateway hops;
- **whole path**: a user message over the gateway WebSocket → Conversation actor (turn, context,
  store writes) → ``VllmHandleModel`` through the deployment handle → token events back over the
  WebSocket — what a Wonder user sees. Each stream is its own conversation.

Each level uses its own conversations, warmed with one turn first (a fresh actor's first model
call also pays for importing Serve and resolving the handle: ``cold_first_turn_ttft_ms``), so the
figures are steady state. In every round the direct request carries exactly the prompt the
Conversation actor will build (system prompt + that conversation's history + the new message) with
the same sampling (greedy, ``max_tokens``), so both generate the same tokens. Per stream: TTFT
(request sent → first token), decode tokens/s (tokens after the first ÷ time from first to last
token); per level: aggregate tokens/s (all tokens ÷ wall time). Tokens are what the engine
reports (``usage.completion_tokens``: the SSE usage chunk, ``ModelFinished``, the
``turn.completed`` frame), never frames: a path that batches deltas sends fewer, larger frames
(``frames_per_stream_p50``).

Prints progress, then ONE JSON object as the last line with ``throughput_ratio`` (whole ÷ direct
aggregate tokens/s at the highest level) and ``added_ttft_ms`` (whole minus direct TTFT at one
stream), each the median over rounds of the paired per-round figures.

``--case replicas`` (two replicas, prefix-cache hit rate and TTFT with and without conversation
affinity in the same run) and ``--case autoscale`` (a burst scales 1 → 2 → 1 replicas, no stream
cut) measure the deployment at cluster scale instead: see ``benchmarks/llm_scale.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SYSTEM_PROMPT = "You are a helpful assistant."
USER_MESSAGE = "Tell me a long story about a dragon who learns to bake bread."


def progress(message: str) -> None:
    print(f"[llm_streaming] {message}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Stream:
    """One measured completion."""

    sent: float
    first: float | None
    last: float | None
    tokens: int
    """Completion tokens as the engine counts them (its ``usage``), the same for every path."""
    frames: int
    """Frames that carried text to the client: one per token, or fewer when deltas are batched."""

    @property
    def ttft_s(self) -> float:
        return (self.first or self.sent) - self.sent

    @property
    def decode_tps(self) -> float | None:
        if self.first is None or self.last is None or self.tokens < 2 or self.last <= self.first:
            return None
        return (self.tokens - 1) / (self.last - self.first)


def summarise(streams: list[Stream], wall_s: float) -> dict[str, Any]:
    decode = [s.decode_tps for s in streams if s.decode_tps is not None]
    tokens = sum(s.tokens for s in streams)
    return {
        "streams": len(streams),
        "tokens": tokens,
        "frames_per_stream_p50": statistics.median(s.frames for s in streams),
        "aggregate_tps": round(tokens / wall_s, 1),
        "decode_tps_per_stream_p50": round(statistics.median(decode), 1) if decode else None,
        "ttft_ms_p50": round(statistics.median(s.ttft_s for s in streams) * 1000, 1),
        "ttft_ms_max": round(max(s.ttft_s for s in streams) * 1000, 1),
        "wall_s": round(wall_s, 2),
    }


# --------------------------------------------------------------------------- direct


async def direct_stream(
    client: Any, url: str, max_tokens: int, messages: list[dict[str, str]]
) -> Stream:
    body = {
        "model": "default",
        "messages": messages,
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = last = None
    tokens = frames = 0
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            payload = json.loads(line[6:])
            for choice in payload.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    last = time.perf_counter()
                    first = first or last
                    frames += 1
            tokens = int((payload.get("usage") or {}).get("completion_tokens") or tokens)
    return Stream(sent, first, last, tokens, frames)


async def run_direct(
    base_url: str, prompts: list[list[dict[str, str]]], max_tokens: int
) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        url = f"{base_url}/chat/completions"
        t0 = time.perf_counter()
        streams = await asyncio.gather(
            *(direct_stream(client, url, max_tokens, messages) for messages in prompts)
        )
        return summarise(list(streams), time.perf_counter() - t0)


def prompt_of(api: Any, conversation_id: str) -> list[dict[str, str]]:
    """What the Conversation actor will send for the next message: system prompt, history, it."""
    items = api.get(f"/v1/conversations/{conversation_id}/messages", params={"limit": 1000})
    roles = {"user": "user", "agent": "assistant"}
    history = [
        {"role": roles[m["role"]], "content": m["content"]}
        for m in items.json()["items"]
        if m["role"] in roles
    ]
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        *history,
        {"role": "user", "content": USER_MESSAGE},
    ]


# --------------------------------------------------------------------------- handle


async def handle_stream(messages: list[dict[str, str]], max_tokens: int) -> Stream:
    from core.llm.protocol import ChatRequest, ModelFinished, TextDelta
    from serving.llm_client import VllmHandleModel

    request = ChatRequest(messages=messages, max_tokens=max_tokens, temperature=0.0)
    sent = time.perf_counter()
    first = last = None
    tokens = frames = 0
    async for chunk in VllmHandleModel().stream(request):
        if isinstance(chunk, TextDelta):
            last = time.perf_counter()
            first = first or last
            frames += 1
        elif isinstance(chunk, ModelFinished):
            tokens = chunk.completion_tokens
    return Stream(sent, first, last, tokens, frames)


async def run_handle(prompts: list[list[dict[str, str]]], max_tokens: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    streams = await asyncio.gather(*(handle_stream(m, max_tokens) for m in prompts))
    return summarise(list(streams), time.perf_counter() - t0)


# --------------------------------------------------------------------------- whole path


async def open_socket(port: int, key: str, conversation_id: str) -> Any:
    import websockets

    ws = await websockets.connect(
        f"ws://127.0.0.1:{port}/v1/conversations/{conversation_id}/stream?after_seq=0",
        additional_headers={"Authorization": f"Bearer {key}"},
        max_size=None,
        open_timeout=120,
    )
    while json.loads(await ws.recv()).get("type") != "subscribed":
        pass
    return ws


async def whole_stream(ws: Any, content: str = USER_MESSAGE) -> Stream:
    await ws.send(json.dumps({"type": "message", "content": content}))
    sent = time.perf_counter()
    first = last = None
    frames = 0
    while True:
        frame = json.loads(await ws.recv())
        kind = frame.get("type")
        if kind == "token":
            last = time.perf_counter()
            first = first or last
            frames += 1
        elif kind == "turn.completed":
            tokens = int(frame["usage"]["completion_tokens"])
            return Stream(sent, first, last, tokens, frames)
        elif kind in ("turn.failed", "error"):
            raise RuntimeError(f"whole path failed: {frame}")


async def run_whole(sockets: list[Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    streams = await asyncio.gather(*(whole_stream(ws) for ws in sockets))
    return summarise(list(streams), time.perf_counter() - t0)


async def open_conversations(
    port: int, setup: dict[str, Any], store: Any, n: int
) -> tuple[list[str], list[Any], list[Stream]]:
    """``n`` new conversations, subscribed one after the other (actor creation is not what is
    measured), each warmed with one turn; returns ids, sockets and the warm-up turns."""
    from core.conversations import create_conversation

    ids, sockets = [], []
    for _ in range(n):
        conversation = create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agent_id"]
        )
        ids.append(conversation.id)
        sockets.append(await open_socket(port, setup["key"], conversation.id))
    warm = await asyncio.gather(*(whole_stream(ws, "Hello!") for ws in sockets))
    return ids, sockets, list(warm)


def setup_store(store: Any, max_tokens: int) -> dict[str, Any]:
    from core.domain import Agent, Client, ModelProfile, Persona, PersonaRef
    from core.ids import new_id, utc_now

    client = Client(id=new_id("client"), name="bench", created_at=utc_now())
    store.clients.insert(client)
    key = f"wk_{new_id()}"
    store.clients.add_api_key(client.id, key, utc_now())
    profile = ModelProfile(
        id="bench-local", provider="vllm", model="default", temperature=0.0, max_tokens=max_tokens
    )
    store.model_profiles.put(profile, utc_now())
    persona = Persona(id="bench-local", system_prompt=SYSTEM_PROMPT, model_profile_id=profile.id)
    store.personas.put(persona, utc_now())
    agent = Agent(
        id=new_id("agent"),
        client_id=client.id,
        name="bench",
        persona_ref=PersonaRef(id=persona.id),
        created_at=utc_now(),
    )
    store.agents.insert(agent)
    return {"client_id": client.id, "key": key, "agent_id": agent.id}


# --------------------------------------------------------------------------- the run


async def measure(args: argparse.Namespace, port: int, store: Any) -> dict[str, Any]:
    import httpx

    base_url = f"http://127.0.0.1:{port}/llm/v1"
    setup = setup_store(store, args.max_tokens)
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {setup['key']}"},
        timeout=60,
        trust_env=False,
    )
    results: dict[str, Any] = {}
    for n in args.levels:
        ids, sockets, warm = await open_conversations(port, setup, store, n)
        if n == min(args.levels):
            results["cold_first_turn_ttft_ms"] = round(warm[0].ttft_s * 1000, 1)
            progress(f"first turn of a fresh conversation actor: TTFT {warm[0].ttft_s:.3f} s")
        rounds: list[dict[str, dict[str, Any]]] = []
        try:
            for r in range(args.rounds):
                prompts = [prompt_of(api, conversation_id) for conversation_id in ids]
                this = {
                    "direct": await run_direct(base_url, prompts, args.max_tokens),
                    "handle": await run_handle(prompts, args.max_tokens),
                    "whole": await run_whole(sockets),  # sends the message: history grows after
                }
                rounds.append(this)
                for path, figures in this.items():
                    progress(f"{n:>2} streams, round {r + 1}: {path:<6} {figures}")
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets))
        results[str(n)] = rounds
    api.close()
    return results


PATHS = ("direct", "handle", "whole")


def median_of(rounds: list[dict[str, dict[str, Any]]], path: str, key: str) -> float | None:
    values = [r[path][key] for r in rounds if r[path][key] is not None]
    return round(statistics.median(values), 1) if values else None


def paired(rounds: list[dict[str, dict[str, Any]]], path: str) -> tuple[float, float]:
    """Median over rounds of (path ÷ direct aggregate tokens/s, path minus direct TTFT p50):
    each round's paths ran back to back, so pairing them cancels most of the machine's drift."""
    ratios = [r[path]["aggregate_tps"] / r["direct"]["aggregate_tps"] for r in rounds]
    added = [r[path]["ttft_ms_p50"] - r["direct"]["ttft_ms_p50"] for r in rounds]
    return round(statistics.median(ratios), 3), round(statistics.median(added), 1)


def summary(results: dict[str, Any], ready_s: float, levels: list[int]) -> dict[str, Any]:
    top, one = results[str(max(levels))], results[str(min(levels))]
    out: dict[str, Any] = {
        "llm_ready_s": round(ready_s, 1),
        "device": os.environ.get("WONDER_LLM_DEVICE", "cpu"),
        "throughput_ratio": paired(top, "whole")[0],
        "added_ttft_ms": paired(one, "whole")[1],
        "handle_throughput_ratio": paired(top, "handle")[0],
        "handle_added_ttft_ms": paired(one, "handle")[1],
        "cold_first_turn_ttft_ms": results["cold_first_turn_ttft_ms"],
    }
    for n in levels:
        rounds = results[str(n)]
        if n != max(levels):
            out[f"throughput_ratio_{n}"] = paired(rounds, "whole")[0]
        for path in PATHS:
            out[f"{path}_{n}_aggregate_tps"] = median_of(rounds, path, "aggregate_tps")
            out[f"{path}_{n}_decode_tps_p50"] = median_of(rounds, path, "decode_tps_per_stream_p50")
            out[f"{path}_{n}_ttft_ms_p50"] = median_of(rounds, path, "ttft_ms_p50")
    return out


def gateway_app(env: dict[str, str], streams: int) -> Any:
    """The gateway, able to hold ``streams`` WebSockets at once.

    Serve counts an open WebSocket as an ongoing request of the replica, so a deployment with
    Serve's default ``max_ongoing_requests`` (5) holds five streams and the sixth handshake waits.
    """
    from cluster.gateway import Gateway, build_gateway_app

    if Gateway.max_ongoing_requests >= streams + 8:
        return build_gateway_app(env)
    wonder_env = {k: v for k, v in env.items() if k.startswith("WONDER_")}
    progress(
        f"gateway max_ongoing_requests={Gateway.max_ongoing_requests} < {streams} streams: "
        f"raised to {streams + 8} for this run"
    )
    return Gateway.options(
        max_ongoing_requests=streams + 8,
        ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": wonder_env}},
    ).bind(env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,8,16", help="concurrent streams, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per level (medians kept)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--case", choices=("paths", "replicas", "autoscale"), default="paths")
    parser.add_argument("--streams", type=int, default=8, help="replicas: concurrent streams")
    parser.add_argument("--conversations", type=int, default=6, help="replicas: per mode")
    parser.add_argument("--turns", type=int, default=4, help="replicas: turns per conversation")
    parser.add_argument("--prefix-max-tokens", type=int, default=16)
    parser.add_argument("--burst", type=int, default=6, help="autoscale: streams in the burst")
    parser.add_argument("--long-tokens", type=int, default=1500, help="autoscale: burst stream")
    parser.add_argument("--tail-tokens", type=int, default=3000, help="autoscale: tail stream")
    parser.add_argument("--downscale-delay-s", type=float, default=10.0)
    parser.add_argument("--settle-s", type=float, default=300.0, help="autoscale: after")
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]

    import ray
    from ray import serve

    data_dir = Path(tempfile.mkdtemp(prefix="wonder-bench-"))
    ray_tmp = tempfile.mkdtemp(prefix="wb", dir="/tmp")
    env = {
        "WONDER_DATA_DIR": str(data_dir),
        "WONDER_MAX_RESIDENT_CONVERSATIONS": "64",
        "RAY_AUTH_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    names = ("WONDER_LLM_DEVICE", "WONDER_LLM_MODEL_DIR", "WONDER_MODEL_CACHE")
    pacing = (
        "WONDER_LLM_STREAM_FRAMES_PER_S",
        "WONDER_LLM_STREAM_MAX_INTERVAL_MS",
        "WONDER_LLM_NICENESS",
    )
    for name in (*names, *pacing):
        if name in os.environ:
            env[name] = os.environ[name]
    os.environ.update(env)
    os.environ.pop("RAY_ADDRESS", None)
    progress("preparing the model (converted once, then cached)")
    from core.settings import settings_from_env
    from core.store import open_store
    from serving.model_setup import ensure_local_model

    settings = settings_from_env(env)
    ensure_local_model(progress=True, settings=settings)
    progress("starting a local Ray, Serve, the LLM deployment and the gateway")
    ray.init(
        num_cpus=4,
        namespace="wonder",
        _temp_dir=ray_tmp,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=False,
    )
    port = _free_port()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        from cluster.serve_apps import placed_llm_app
        from serving.llm import LLM_APP_NAME, LLM_ROUTE_PREFIX

        if args.case != "paths":
            print(json.dumps(run_scale_case(args, env)))
            return
        t0 = time.perf_counter()
        serve.run(placed_llm_app(settings), name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
        ready_s = time.perf_counter() - t0
        progress(f"LLM deployment ready in {ready_s:.1f} s")
        serve.run(gateway_app(env, max(args.levels)), name="gateway", route_prefix="/")
        results = asyncio.run(measure(args, port, open_store(env)))
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    figures = summary(results, ready_s, args.levels)
    pacing = {
        "stream_frames_per_s": settings.llm_stream_frames_per_s,
        "stream_max_interval_ms": settings.llm_stream_max_interval_ms,
        "llm_niceness": settings.llm_niceness,
    }
    print(json.dumps({**pacing, **figures}))


def run_scale_case(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from ray import serve

    import benchmarks.llm_scale as scale
    from core.settings import settings_from_env
    from serving.llm import LLM_APP_NAME, LLM_ROUTE_PREFIX, build_llm_app

    def deploy(overrides: dict[str, str]) -> float:
        t0 = time.perf_counter()
        app = build_llm_app(settings_from_env({**env, **overrides}))
        serve.run(app, name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
        progress(f"LLM deployment {overrides} ready in {time.perf_counter() - t0:.1f} s")
        return time.perf_counter() - t0

    if args.case == "replicas":
        return scale.run_replicas(args, deploy)
    ready = deploy(scale.autoscale_env(args))
    return {"ready_s": round(ready, 1), **asyncio.run(scale.autoscale(args))}


if __name__ == "__main__":  # vLLM and Ray spawn processes: nothing runs on import
    main()
