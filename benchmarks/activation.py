"""Conversations that start fast and weigh little: activation, bursts, RSS.

Starts its own local Ray and the gateway (``benchmarks.harness``); the agent is a zero-latency
scripted echo without hooks, so what is measured is Wonder's own cost. In one run:

- ``bare_actor``: a bare named detached Ray actor created and called once (the floor), and its
  RSS once started; started ``max_starting`` at a time (the directory's start slots), their rate
  (starts per second) is the start slots' capacity the burst's activations are held against;
- ``burst``: B new conversations (default 200), each driven by its own WebSocket client that
  connects, sends one message and waits for ``turn.completed``, all at once: ack latency
  (message frame → ``ack`` frame) p50/p99, first-turn completion (message frame →
  ``turn.completed``) p50/p99, activations/s (B ÷ time until every turn completed), refusals;
- ``conversation_rss``: RSS of resident conversation actors sampled during the burst (median
  and max), and its ratio to the bare actor's;
- ``reactivation``: a message to an evicted conversation through the ``Conversations`` adapter:
  acknowledged (p50/p99) and answered (p50/p99), beside the bare actor start;
- ``serve_floor``: the same burst against a Serve WebSocket endpoint that only answers each
  client's frame with an ``ack`` (no store, no actors), deployed beside the gateway with its
  niceness: what Ray Serve's proxy and one replica cost B clients on this machine, the floor of
  the burst's acknowledgement (run before the burst, whose actors keep starting after it);
- ``store_ack``: B store acknowledgements (``Intake.acknowledge``, what the gateway does for a
  message whose actor is not started) one after the other in this process, on conversations of
  their own, nothing else running: the Python cost of the burst's durable writes alone;
- ``cpu_ms_per_client`` of both bursts: CPU milliseconds per client (from ``/proc``) of the
  Serve proxy, the gateway's and the floor's replicas, the conversation directory, the clients
  (this process) and the whole machine, from the burst's start until its last client left;
- ``conversation_start``: the directory's median start (created → ready: what a start slot is
  held for) against the bare actor's, and the ratios the targets are stated in: activations/s
  over the bare start rate, burst acknowledgement p99 over the Serve floor's;
- ``start_breakdown``: bare and conversation actors started one after the other, nothing else
  starting: created → process spawned, spawned → ready, the conversation actor's ``__init__``
  (ports, store, taking its log), and a fresh worker's import of a conversation actor's modules.

``--ack-only``: the burst's clients leave once acknowledged (the acknowledgement under the burst's
starts, without waiting minutes for 200 first turns). ``--gateway-niceness 15``: the gateway
replica and the Serve proxy at Ray's worker niceness, as before ``cluster.niceness`` (the
baseline for the default, 0). ``--gateway-replicas N``: N gateway replicas on this one node.
The summary carries the 1-minute load average before and after.

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from harness import System, conversations, local_system, ms, reporter, rss_mib, setup_store

progress = reporter("activation")


class Bare:
    def pid(self) -> int:
        return os.getpid()


class ImportProbe:
    """A fresh worker that imports what a conversation actor's process imports, and says how
    long that took (the part of a start a bare actor does not pay)."""

    def imports(self, modules: list[str]) -> float:
        import importlib

        t0 = time.perf_counter()
        for module in modules:
            importlib.import_module(module)
        return time.perf_counter() - t0


def process_started(pid: int) -> float:
    """When a process of this machine started (epoch seconds), from /proc."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    booted = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return booted + ticks / os.sysconf("SC_CLK_TCK")


async def start_breakdown(system: System, setup: dict[str, Any], n: int) -> dict[str, Any]:
    """``n`` bare actors and ``n`` conversation actors started one after the other (nothing else
    starting): created → process spawned (the raylet) and process spawned → ready (Python, Ray's
    worker, and for a conversation its imports and ``__init__``), and what a fresh worker takes
    to import a conversation actor's modules."""
    import ray

    from core.conversations import create_conversation

    bare: list[tuple[float, float]] = []
    for i in range(n):
        t0 = time.time()
        handle = (
            ray.remote(Bare)
            .options(  # type: ignore[attr-defined]
                name=f"bench-split-{i}-{time.time_ns()}", lifetime="detached", num_cpus=0
            )
            .remote()
        )
        pid = await handle.pid.remote()
        ready = time.time()
        bare.append((process_started(pid) - t0, ready - process_started(pid)))
        ray.kill(handle)
    actors = conversations(system.env)
    conv: list[tuple[float, float, float, float]] = []
    for _ in range(n):
        conv_id = create_conversation(
            system.store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        ).id
        t0 = time.time()
        status = await actors.status(conv_id)  # activated through the directory, then asked
        ready = time.time()
        started = process_started(int(status["pid"]))
        constructed = float(status["constructed_at"]) - started  # Ray's worker and our imports
        conv.append((started - t0, ready - started, float(status["init_ms"]) / 1000, constructed))
    probe = ray.remote(ImportProbe).options(num_cpus=0).remote()  # type: ignore[attr-defined]
    await probe.__ray_ready__.remote()
    imports = await probe.imports.remote(["actors.conversation.actor", "cluster.wiring"])
    ray.kill(probe)

    def p50(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 1)

    return {
        "bare_spawn_ms": p50([b[0] for b in bare]),
        "bare_spawned_to_ready_ms": p50([b[1] for b in bare]),
        "conversation_spawn_ms": p50([c[0] for c in conv]),
        "conversation_spawned_to_ready_ms": p50([c[1] for c in conv]),
        "conversation_spawned_to_constructed_ms": p50([c[3] for c in conv]),
        "conversation_init_ms": p50([c[2] for c in conv]),
        "conversation_imports_in_a_fresh_worker_ms": round(imports * 1000, 1),
    }


async def bare_actors(n: int, at_once: int) -> tuple[list[float], list[float], float]:
    """Create ``n`` bare named detached actors, ``at_once`` at a time (the directory's start
    slots): each one's start time, RSS, and the starts per second."""
    import ray

    starts: list[float] = []
    rss: list[float] = []
    handles: list[Any] = []

    async def one(i: int) -> int:
        t0 = time.perf_counter()
        handle = (
            ray.remote(Bare)
            .options(  # type: ignore[attr-defined]
                name=f"bench-bare-{i}-{time.time_ns()}", lifetime="detached", num_cpus=0
            )
            .remote()
        )
        pid: int = await handle.pid.remote()
        starts.append(time.perf_counter() - t0)
        handles.append(handle)
        return pid

    began = time.perf_counter()
    pids: list[int] = []
    for first in range(0, n, at_once):
        pids += await asyncio.gather(*(one(i) for i in range(first, min(n, first + at_once))))
    rate = n / (time.perf_counter() - began)
    await asyncio.sleep(0.5)  # let them settle before reading their RSS
    rss = [rss_mib(pid) for pid in pids]
    for handle in handles:
        ray.kill(handle)
    return starts, rss, rate


def alive_actors(dashboard_url: str) -> list[Any]:
    """Every alive actor of the cluster (Ray's state API)."""
    from ray.util.state import list_actors

    return list_actors(
        address=dashboard_url,
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )


def conversation_rss(dashboard_url: str) -> list[float]:
    """RSS of every alive conversation actor (same machine: read from /proc)."""
    found = []
    for actor in alive_actors(dashboard_url):
        if (actor.name or "").startswith("conversation:") and actor.pid:
            try:
                found.append(rss_mib(int(actor.pid)))
            except OSError:
                pass  # evicted meanwhile
    return [r for r in found if r > 0]


def cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user + system, every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every core of this machine spent busy (not idle or waiting), from /proc."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def serve_pids(dashboard_url: str) -> dict[str, int]:
    """The pids of the Serve proxy, the gateway's and the floor's replicas, and the
    conversation directory."""
    found = {}
    for actor in alive_actors(dashboard_url):
        for role, prefix in (
            ("proxy", "ProxyActor"),
            ("gateway", "ServeReplica:gateway"),
            ("floor", "ServeReplica:floor"),
            ("directory", "ConversationDirectory"),
        ):
            if (actor.class_name or "").startswith(prefix) and actor.pid:
                found[role] = int(actor.pid)
    return found


class CpuUse:
    """CPU milliseconds per client a burst cost: the Serve processes and the directory
    (``serve_pids``), the clients (this process) and the whole machine."""

    def __init__(self, dashboard_url: str) -> None:
        self.pids = {**serve_pids(dashboard_url), "clients": os.getpid()}
        self.start = self._now()

    def _now(self) -> dict[str, float]:
        return {
            **{role: cpu_s(pid) for role, pid in self.pids.items()},
            "machine": machine_busy_s(),
        }

    def per_client_ms(self, clients: int) -> dict[str, float]:
        end = self._now()
        return {role: round((end[role] - self.start[role]) * 1000 / clients, 2) for role in end}


def deploy_floor(system: System) -> None:
    """A Serve application at ``/floor``: a WebSocket that acks each frame, nothing else."""
    from ray import serve

    from cluster.niceness import raised_env
    from core.settings import settings_from_env

    app = FastAPI()

    @app.websocket("/ws")
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                frame = json.loads(await websocket.receive_text())
                await websocket.send_json({"type": "ack", "id": frame.get("id")})
        except WebSocketDisconnect:
            pass

    @serve.deployment(name="floor", max_ongoing_requests=10_000)
    @serve.ingress(app)
    class Floor:
        pass

    env = raised_env(settings_from_env(system.env))
    options = {"num_cpus": 0, "runtime_env": {"env_vars": env}}
    serve.run(
        Floor.options(ray_actor_options=options).bind(),  # type: ignore[attr-defined]
        name="floor",
        route_prefix="/floor",
    )


async def floor_burst(system: System, setup: dict[str, Any], size: int) -> dict[str, Any]:
    """B clients at once against ``/floor/ws``: connect, send a frame, time its ``ack``."""
    url = f"ws://127.0.0.1:{system.port}/floor/ws"
    cpu = CpuUse(system.dashboard_url)
    results = await asyncio.gather(
        *(one_client(system, setup["key"], "", ack_only=True, url=url) for _ in range(size)),
        return_exceptions=True,
    )
    acks = [r["ack"] for r in results if isinstance(r, dict) and r.get("ack") is not None]
    for failure in [r for r in results if not isinstance(r, dict)][:3]:
        progress(f"Serve floor failure: {failure!r:.300}")
    return {
        "clients": size,
        "acknowledged": len(acks),
        "ack": ms(acks) if acks else None,
        "cpu_ms_per_client": cpu.per_client_ms(size),
    }


def store_acks(system: System, setup: dict[str, Any], size: int) -> dict[str, Any]:
    """``size`` store acknowledgements in a row, each on a new conversation: their times."""
    from actors.conversation.intake import Intake
    from core.conversations import create_conversation
    from core.ids import new_id

    convs = [
        create_conversation(
            system.store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        ).id
        for _ in range(size)
    ]
    intake = Intake(system.store)
    times = []
    for conv_id in convs:
        t0 = time.perf_counter()
        ack = intake.acknowledge(conv_id, "hello", "bench", message_id=new_id("msg"))
        times.append(time.perf_counter() - t0)
        assert ack is not None, conv_id
    return {"acks": size, "each": ms(times), "all_ms": round(sum(times) * 1000, 1)}


async def one_client(
    system: System, key: str, conv_id: str, ack_only: bool = False, url: str | None = None
) -> dict[str, Any]:
    import websockets

    url = url or f"ws://127.0.0.1:{system.port}/v1/conversations/{conv_id}/stream?after_seq=0"
    async with websockets.connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None, open_timeout=60
    ) as ws:
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "message", "content": "hello", "id": "m1"}))
        acked = None
        turn_id = None
        while True:
            frame = json.loads(await ws.recv())
            kind = frame.get("type")
            if kind == "ack":
                acked, turn_id = time.perf_counter() - t0, frame.get("turn_id")
                if ack_only:
                    return {"ack": acked}
            elif kind == "turn.completed" and frame.get("turn_id") == turn_id:
                return {"ack": acked, "done": time.perf_counter() - t0}
            elif kind in ("turn.failed", "error"):
                return {"ack": acked, "error": frame}


async def burst(
    system: System, setup: dict[str, Any], size: int, ack_only: bool = False
) -> dict[str, Any]:
    from core.conversations import create_conversation

    convs = [
        create_conversation(
            system.store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        ).id
        for _ in range(size)
    ]
    rss_samples: list[float] = []
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            rss_samples.extend(await asyncio.to_thread(conversation_rss, system.dashboard_url))
            await asyncio.sleep(2.0)

    done = 0

    async def client(conv_id: str) -> dict[str, Any]:
        nonlocal done
        result = await one_client(system, setup["key"], conv_id, ack_only)
        done += 1
        if done % 25 == 0:
            progress(f"burst: {done}/{size} {'acknowledged' if ack_only else 'answered'}")
        return result

    sampler = asyncio.create_task(sample())
    cpu = CpuUse(system.dashboard_url)
    t0 = time.perf_counter()
    results = await asyncio.gather(*(client(c) for c in convs), return_exceptions=True)
    elapsed = time.perf_counter() - t0
    cpu_ms = cpu.per_client_ms(size)
    stop.set()
    await sampler
    finished = "ack" if ack_only else "done"
    answered = [r for r in results if isinstance(r, dict) and r.get(finished) is not None]
    failures = [r for r in results if not (isinstance(r, dict) and r.get(finished) is not None)]
    for failure in failures[:3]:
        progress(f"burst failure: {failure!r:.300}")
    acks = [r["ack"] for r in results if isinstance(r, dict) and r.get("ack") is not None]
    stats = await conversations(system.env).directory_stats()
    return {
        "conversations": size,
        "answered": len(answered),
        "failed": len(failures),
        "elapsed_s": round(elapsed, 1),
        "activations_per_s": None if ack_only else round(len(answered) / elapsed, 2),
        "ack": ms(acks) if acks else None,
        "first_turn": ms([r["done"] for r in answered]) if answered and not ack_only else None,
        "cpu_ms_per_client": cpu_ms,
        "rss_samples": rss_samples,
        "directory": {k: v for k, v in stats.items() if k != "conversations"},
    }


async def reactivation(system: System, setup: dict[str, Any], n: int) -> dict[str, Any]:
    from core.conversations import create_conversation

    actors = conversations(system.env)
    acked, answered = [], []
    for i in range(n):
        conv = create_conversation(
            system.store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        )
        first = await actors.post_message(conv.id, "warm", "bench")
        await actors.wait_for_turn(conv.id, first.turn_id)
        assert await actors.evict(conv.id)
        t0 = time.perf_counter()
        ack = await actors.post_message(conv.id, f"back {i}", "bench")
        acked.append(time.perf_counter() - t0)
        outcome = await actors.wait_for_turn(conv.id, ack.turn_id)
        answered.append(time.perf_counter() - t0)
        assert outcome.status.value == "completed", outcome
    return {"ack": ms(acked), "answered": ms(answered)}


async def main_async(args: argparse.Namespace, system: System) -> dict[str, Any]:
    setup = setup_store(system.store)
    slots = int((await conversations(system.env).directory_stats())["max_starting"])
    starts, bare_rss, bare_rate = await bare_actors(args.bare, slots)
    results: dict[str, Any] = {
        "start_slots": slots,
        "bare_actor_start": ms(starts),
        "bare_start_rate_per_s": round(bare_rate, 3),
        "bare_actor_rss_mib": round(statistics.median(bare_rss), 1),
    }
    progress(f"bare actor: start {results['bare_actor_start']}, RSS {bare_rss} MiB")
    results["start_breakdown"] = await start_breakdown(system, setup, args.bare)
    progress(f"start breakdown: {results['start_breakdown']}")
    results["reactivation"] = await reactivation(system, setup, args.reactivations)
    progress(f"re-activation: {results['reactivation']}")
    deploy_floor(system)
    results["serve_floor"] = await floor_burst(system, setup, args.burst)
    progress(f"Serve floor: {results['serve_floor']}")
    results["store_ack"] = store_acks(system, setup, args.burst)
    progress(f"store acknowledgements in a row: {results['store_ack']}")
    progress(f"burst of {args.burst} new conversations over the WebSocket")
    results["burst"] = await burst(system, setup, args.burst, args.ack_only)
    rss = results["burst"].pop("rss_samples")
    if rss:
        results["conversation_rss_mib"] = {
            "median": round(statistics.median(rss), 1),
            "max": round(max(rss), 1),
            "samples": len(rss),
        }
    progress(f"burst: {results['burst']}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst", type=int, default=200, help="new conversations at once")
    parser.add_argument("--cap", type=int, default=64, help="resident conversation cap")
    parser.add_argument("--bare", type=int, default=10, help="bare actors started")
    parser.add_argument("--reactivations", type=int, default=20)
    parser.add_argument(
        "--max-starting",
        type=int,
        default=None,
        help="conversation actors starting at once (default: the settings' default)",
    )
    parser.add_argument(
        "--gateway-replicas",
        type=int,
        default=None,
        help="gateway replicas, all on this node (WONDER_GATEWAY_NUM_REPLICAS; default 1)",
    )
    parser.add_argument(
        "--ack-only",
        action="store_true",
        help="burst clients leave once acknowledged (no first-turn or activation figures)",
    )
    parser.add_argument(
        "--gateway-niceness",
        type=int,
        default=None,
        help="the gateway's and Serve proxy's niceness (WONDER_GATEWAY_NICENESS; 15: as Ray's "
        "other workers, the baseline)",
    )
    args = parser.parse_args()

    settings = {"WONDER_MAX_RESIDENT_CONVERSATIONS": str(args.cap)}
    if args.gateway_niceness is not None:
        settings["WONDER_GATEWAY_NICENESS"] = str(args.gateway_niceness)
    if args.gateway_replicas is not None:
        settings["WONDER_GATEWAY_NUM_REPLICAS"] = str(args.gateway_replicas)
        settings["WONDER_GATEWAY_MAX_REPLICAS_PER_NODE"] = str(args.gateway_replicas)
    if args.max_starting is not None:
        settings["WONDER_MAX_STARTING_CONVERSATIONS"] = str(args.max_starting)
    load_before = os.getloadavg()[0]
    with local_system(progress, **settings) as system:
        results = asyncio.run(main_async(args, system))
    load_after = os.getloadavg()[0]

    burst_result = results["burst"]
    floor_p99 = (results["serve_floor"]["ack"] or {}).get("p99")
    burst_p99 = (burst_result["ack"] or {}).get("p99")
    rate = burst_result["activations_per_s"]
    summary: dict[str, Any] = {
        "start_slots": results["start_slots"],
        "bare_actor_start_p50_ms": results["bare_actor_start"]["p50"],
        "bare_start_rate_per_s": results["bare_start_rate_per_s"],
        "conversation_start_p50_ms": burst_result["directory"].get("start_ms_p50"),
        "activations_over_bare_rate": (
            round(rate / results["bare_start_rate_per_s"], 2) if rate is not None else None
        ),
        "start_breakdown": results["start_breakdown"],
        "burst_ack_p99_over_floor": (
            round(burst_p99 / floor_p99, 2) if burst_p99 and floor_p99 else None
        ),
        "bare_actor_rss_mib": results["bare_actor_rss_mib"],
        "reactivation_ack_p50_ms": results["reactivation"]["ack"]["p50"],
        "reactivation_ack_p99_ms": results["reactivation"]["ack"]["p99"],
        "reactivation_answered_p50_ms": results["reactivation"]["answered"]["p50"],
        "reactivation_answered_p99_ms": results["reactivation"]["answered"]["p99"],
        "burst_conversations": burst_result["conversations"],
        "burst_answered": burst_result["answered"],
        "burst_ack_p50_ms": (burst_result["ack"] or {}).get("p50"),
        "burst_ack_p99_ms": (burst_result["ack"] or {}).get("p99"),
        "burst_first_turn_p50_ms": (burst_result["first_turn"] or {}).get("p50"),
        "burst_first_turn_p99_ms": (burst_result["first_turn"] or {}).get("p99"),
        "burst_activations_per_s": burst_result["activations_per_s"],
        "serve_floor_ack_p50_ms": (results["serve_floor"]["ack"] or {}).get("p50"),
        "serve_floor_ack_p99_ms": (results["serve_floor"]["ack"] or {}).get("p99"),
        "serve_floor_cpu_ms_per_client": results["serve_floor"]["cpu_ms_per_client"],
        "burst_cpu_ms_per_client": burst_result["cpu_ms_per_client"],
        "store_ack_each_p50_ms": results["store_ack"]["each"]["p50"],
        "store_acks_all_ms": results["store_ack"]["all_ms"],
        "cap": args.cap,
        "gateway_niceness": int(settings.get("WONDER_GATEWAY_NICENESS", "0")),
        "gateway_replicas": int(settings.get("WONDER_GATEWAY_NUM_REPLICAS", "1")),
        "load_1m_before_after": [round(load_before, 1), round(load_after, 1)],
    }
    if "conversation_rss_mib" in results:
        median = results["conversation_rss_mib"]["median"]
        summary["conversation_rss_mib"] = median
        summary["conversation_rss_over_bare"] = round(median / results["bare_actor_rss_mib"], 2)
    print(json.dumps({"detail": results}, default=str))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
