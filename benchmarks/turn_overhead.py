"""Turn overhead, re-activation latency and residency at scale.

Starts its own local Ray (own temp dir, free ports, no dashboard auth), a Serve gateway, and a
store in a temp dir. The model is a zero-latency scripted echo and the persona has no tools, so
what is measured is Wonder's own overhead. Figures:

- ``actor_rtt_p50_ms``: a plain Ray async actor round trip (the baseline, same run);
  ``task_rtt_from_actor_p50_ms``: a no-op Ray task from an async actor;
  ``member_call_from_actor_p50_ms``: a no-op call from an async actor to an actor shaped as an
  executor pool member (sync, one call at a time), awaited as a hook's call is: a hook's floor;
- ``turn_overhead_p50/p99_ms``: message posted → turn completed through the Conversation actor's
  handle, with both hooks (context assembly and memory extraction as executor tasks);
- ``turn_overhead_nohooks_p50_ms``: the same without hooks;
- ``turn_context_hook_p50_ms`` / ``turn_extraction_hook_p50_ms``: the same with one hook only
  (what each adds; the extraction runs after the turn completed, once the conversation is quiet:
  ``WONDER_EXTRACTION_QUIET_S``; ``=0`` runs it at once, beside the next turn);
- ``extraction_drain_p50_ms``: from the last turn of a round of the both-hooks series until every
  extraction of its turns is stored (the next series starts only then, so no series pays for
  another's extractions);
- ``paused_turn_p50/p99_ms``: turns with both hooks, each after a pause of ``--pause-min`` to
  ``--pause-max`` seconds (default 5 to 30) with nothing else running: what a conversation a user
  comes back to waits (Ray ends idle worker processes after 1 s); ``paused_turn_nohooks_*`` the
  same without hooks, alternating with them;
- ``gateway_turn_overhead_p50/p99_ms``: the same through the gateway WebSocket (send a message
  frame → receive ``turn.completed``; skipped with ``--actor-only``), and
  ``gateway_over_actor_p50`` its p50 over the actor series' (series run one after the other);
- ``paired_actor_turn_p50_ms`` / ``paired_gateway_turn_p50_ms``: both hooks, one turn through
  the actor's handle and one over the gateway WebSocket taking turns (two conversations), so
  both meet the same load; ``gateway_over_actor_paired_p50`` their ratio;
- ``reactivation_p50/p99_ms``: message to an evicted conversation → acknowledged, beside
  ``bare_actor_start_p50_ms``: a bare named detached actor created and called once (its floor);
- ``load_1m``: the machine's 1-minute load average as each series began and ended (``actor``,
  ``paused``, ``gateway``), and ``executor_pool_size`` (``WONDER_EXECUTOR_POOL_SIZE``; 0 runs
  every hook and tool task as a Ray task, as before the pool): compare figures of one run, or of
  runs at a like load;
- scale run: N conversations messaged once each, ``max_resident_actors`` sampled from the Ray
  state API and the directory's peak, under ``--cap``;
- ``--recording``: instead of all the above, what recording adds to a turn
  (docs/observability.md), in this process without Ray's noise (``harness.inprocess_cluster``):
  the same turns (both hooks, so model calls, executor tasks and hook spans are all recorded)
  with recording and tracing off, on, and on with OTLP export to a receiver on 127.0.0.1,
  interleaved turn by turn; ``recording_added_p50_ms`` / ``recording_export_added_p50_ms`` are the
  differences of the p50s against the same run's ``off`` series.

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from typing import Any

from harness import (
    conversations,
    extractions_stored,
    local_system,
    ms,
    reporter,
    setup_store,
)

progress = reporter("turn_overhead")
ROUNDS = 3  # rounds the actor-handle series alternate in


def _noop() -> int:
    return 1


class _Member:
    """Shaped as an executor pool member (a sync actor running one call at a time on its main
    thread), doing nothing: what a hook's call costs before any work."""

    def run(self, task_json: str, task_input: dict[str, Any]) -> dict[str, Any]:
        return {"success": True, "result": None}


class Pinger:
    async def ping(self) -> int:
        return 1

    async def task_rtts(self, n: int) -> list[float]:
        """Round trips of a trivial Ray task submitted from this actor (as a hook is)."""
        import ray

        noop = ray.remote(num_cpus=0)(_noop)
        await noop.remote()
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await noop.remote()
            samples.append(time.perf_counter() - t0)
        return samples

    async def member_rtts(self, n: int, task_input: dict[str, Any]) -> list[float]:
        """Round trips of a no-op call to a pool-member-shaped actor from this actor, awaited as
        the pool's caller awaits it: the floor of a hook on the pool."""
        import ray

        member: Any = ray.remote(_Member).options(num_cpus=0, max_concurrency=1).remote()
        await member.run.remote("{}", task_input)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await asyncio.wrap_future(member.run.remote("{}", task_input).future())
            samples.append(time.perf_counter() - t0)
        ray.kill(member)
        return samples


async def _bare_actor_starts(n: int) -> list[float]:
    """Baseline for re-activation: create a bare named detached actor and call it once."""
    import ray

    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        handle = (
            ray.remote(Pinger)
            .options(  # type: ignore[attr-defined]
                name=f"bench-bare-{i}-{time.time_ns()}", lifetime="detached", num_cpus=0
            )
            .remote()
        )
        await handle.ping.remote()
        samples.append(time.perf_counter() - t0)
        ray.kill(handle)
    return samples


def _conversations() -> Any:
    from core.settings import wonder_env

    return conversations(wonder_env())


async def _actor_turns(conv_id: str, n: int, acks: list[float] | None = None) -> list[float]:
    handle = await _conversations().actor(conv_id)
    await handle.status.remote()
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        ack = await handle.post_message.remote(f"m{i}", "bench", message_id=None)
        if acks is not None:
            acks.append(time.perf_counter() - t0)
        done = await handle.wait_for_turn.remote(ack.turn_id)
        samples.append(time.perf_counter() - t0)
        if done.status.value != "completed":  # counted (and its time kept), not hidden
            FAILED.append(f"{conv_id}: {done.failure_reason}")
            progress(f"turn failed: {done.failure_reason}")
    return samples


async def _gateway_socket(port: int, key: str, conv_id: str) -> Any:
    """A WebSocket on a conversation with no turns yet, the replay of ``conversation_started``
    drained. Use one for all of a series' turns: a second one opened from seq 0 would replay the
    first one's turns, and their frames would be taken for the new turns'."""
    import websockets

    url = f"ws://127.0.0.1:{port}/v1/conversations/{conv_id}/stream?after_seq=0"
    ws = await websockets.connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None
    )
    await ws.send(json.dumps({"type": "ping", "id": "warm"}))
    while json.loads(await ws.recv()).get("type") != "pong":
        pass
    return ws


async def _gateway_turn(
    ws: Any, i: int, acks: list[float] | None = None, replies: list[float] | None = None
) -> float:
    """One turn over ``ws``: message frame → ``turn.completed`` (memory extraction runs after
    it, seed 001); ``replies``: message frame → the agent's ``message`` event (the reply, what
    the user waits for); ``acks``: message frame → its ``ack`` frame."""
    t0 = time.perf_counter()
    await ws.send(json.dumps({"type": "message", "content": f"g{i}", "id": f"m{i}"}))
    # The turn's events may overtake its ack: done when both are in.
    turn_id: str | None = None
    completed: set[str] = set()
    while turn_id is None or turn_id not in completed:
        frame = json.loads(await ws.recv())
        kind = str(frame.get("type"))
        FRAMES[kind] = FRAMES.get(kind, 0) + 1
        if kind == "ack" and frame.get("id") == f"m{i}":
            turn_id = str(frame.get("turn_id"))
            if acks is not None:
                acks.append(time.perf_counter() - t0)
        message = frame.get("message") or {}
        if kind == "message" and message.get("role") == "agent" and replies is not None:
            replies.append(time.perf_counter() - t0)
        if kind == "turn.completed":
            completed.add(str(frame.get("turn_id")))
        if kind in ("turn.failed", "error"):
            raise RuntimeError(frame)
    return time.perf_counter() - t0


async def _gateway_turns(
    port: int, key: str, conv_id: str, n: int, acks: list[float] | None = None, warm: int = 0
) -> tuple[list[float], list[float]]:
    """``n`` turns over one WebSocket (``_gateway_turn``); the first ``warm`` are not counted."""
    samples: list[float] = []
    replies: list[float] = []
    ws = await _gateway_socket(port, key, conv_id)
    try:
        for i in range(warm):
            await _gateway_turn(ws, i)
        for i in range(warm, warm + n):
            samples.append(await _gateway_turn(ws, i, acks, replies))
    finally:
        await ws.close()
    return samples, replies


async def _paired_turns(
    port: int, key: str, actor_conv: str, gateway_conv: str, n: int
) -> tuple[list[float], list[float]]:
    """``n`` pairs of turns, one through the actor's handle and one over the gateway's
    WebSocket, taking turns (which goes first alternates): both series see the same machine
    at the same moment, so their ratio does not move with the load between series."""
    actor: list[float] = []
    gateway: list[float] = []
    ws = await _gateway_socket(port, key, gateway_conv)
    try:
        for i in range(10):  # warm
            await _gateway_turn(ws, i)
        for i in range(10, 10 + n):
            if i % 2:
                actor += await _actor_turns(actor_conv, 1)
            gateway.append(await _gateway_turn(ws, i))
            if not i % 2:
                actor += await _actor_turns(actor_conv, 1)
    finally:
        await ws.close()
    return actor, gateway


async def _paused_turns(
    series: dict[str, str], pauses: int, low: float, high: float
) -> dict[str, list[float]]:
    """One turn of each series in turn, each after a pause drawn in [low, high] seconds."""
    draw = random.Random(32)
    samples: dict[str, list[float]] = {name: [] for name in series}
    for i in range(pauses):
        for name, conv_id in series.items():
            await asyncio.sleep(draw.uniform(low, high))
            (took,) = await _actor_turns(conv_id, 1)
            samples[name].append(took)
            progress(f"paused turn {i + 1}/{pauses} ({name}): {took * 1000:.1f} ms")
    return samples


DASHBOARD: dict[str, str] = {}
FRAMES: dict[str, int] = {}  # gateway frames received during timed turns, by type
FAILED: list[str] = []  # turns through the actor that failed (a hook timed out, ...)
LOADS: dict[str, list[float]] = {}  # the 1-minute load average as each series began and ended


def _pool_size() -> int:
    from core.settings import settings_from_env, wonder_env

    return settings_from_env(wonder_env()).executor_pool_size


def _load(series: str) -> None:
    LOADS.setdefault(series, []).append(round(os.getloadavg()[0], 1))


def _alive_conversations() -> int:
    from ray.util.state import list_actors

    alive = list_actors(
        address=DASHBOARD["url"],
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return sum(1 for a in alive if (a.name or "").startswith("conversation:"))


async def _reactivation(store: Any, setup: dict[str, Any], n: int) -> list[float]:
    from core.conversations import create_conversation

    conversations = _conversations()
    samples = []
    for i in range(n):
        conv = create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        )
        first = await conversations.post_message(conv.id, "warm", "bench")
        await conversations.wait_for_turn(conv.id, first.turn_id)
        assert await conversations.evict(conv.id)
        t0 = time.perf_counter()
        ack = await conversations.post_message(conv.id, f"back {i}", "bench")
        samples.append(time.perf_counter() - t0)
        await conversations.wait_for_turn(conv.id, ack.turn_id)
    return samples


async def _scale(
    store: Any, setup: dict[str, Any], total: int, cap: int, concurrency: int
) -> dict[str, Any]:
    from core.conversations import create_conversation

    actors = _conversations()
    await actors.configure_directory(max_resident=cap)
    convs = [
        create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agents"]["nohooks"].id
        )
        for _ in range(total)
    ]
    done = 0
    peak_alive = 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_alive
        while not stop.is_set():
            peak_alive = max(peak_alive, await asyncio.to_thread(_alive_conversations))
            await asyncio.sleep(1.0)

    async def worker(queue: asyncio.Queue[str]) -> None:
        nonlocal done
        while True:
            try:
                conv_id = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            ack = await actors.post_message(conv_id, "hello", "bench")
            result = await actors.wait_for_turn(conv_id, ack.turn_id)
            assert result.status.value == "completed", result
            done += 1
            if done % 100 == 0:
                stats = await actors.directory_stats()
                progress(
                    f"scale: {done}/{total} conversations answered, "
                    f"resident {stats['resident']}, peak alive {peak_alive}"
                )

    queue: asyncio.Queue[str] = asyncio.Queue()
    for conv in convs:
        queue.put_nowait(conv.id)
    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(queue) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    stop.set()
    await sampler
    stats = await actors.directory_stats()
    return {
        "conversations": total,
        "cap": cap,
        "elapsed_s": round(elapsed, 1),
        "turns_per_s": round(total / elapsed, 1),
        "peak_resident": stats["peak_resident"],
        "max_alive_sampled": max(peak_alive, _alive_conversations()),
    }


async def _gateway_series(
    store: Any, setup: dict[str, Any], port: int, turns: int
) -> dict[str, Any]:
    """Turns and replies through the gateway WebSocket, with both hooks and without."""
    from core.conversations import create_conversation

    results: dict[str, Any] = {}
    hooks_agent = setup["agents"]["hooks"].id
    convs = [
        create_conversation(store, client_id=setup["client_id"], agent_id=hooks_agent)
        for _ in range(2)  # one followed through the actor, one over the WebSocket
    ]
    await _actor_turns(convs[0].id, 10)
    actor, gateway = await _paired_turns(port, setup["key"], convs[0].id, convs[1].id, turns)
    results["paired_actor"], results["paired_gateway"] = ms(actor), ms(gateway)
    for conv in convs:
        await extractions_stored(store, conv.id)
    progress(f"paired turns via actor / via gateway WebSocket (hooks): {ms(actor)} / {ms(gateway)}")
    for name, suffix in (("hooks", ""), ("nohooks", "_nohooks")):
        conv = create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agents"][name].id
        )
        acks: list[float] = []
        completed, replies = await _gateway_turns(port, setup["key"], conv.id, turns, acks, 10)
        results[f"gateway{suffix}"], results[f"gateway_reply{suffix}"] = ms(completed), ms(replies)
        results[f"gateway_ack{suffix}"] = ms(acks)
        await extractions_stored(store, conv.id)
        progress(f"ack via gateway WebSocket ({name}): {results[f'gateway_ack{suffix}']}")
        progress(f"turn via gateway WebSocket ({name}): {results[f'gateway{suffix}']}")
        progress(f"reply via gateway WebSocket ({name}): {results[f'gateway_reply{suffix}']}")
    return results


async def main_async(args: argparse.Namespace, store: Any, port: int) -> dict[str, Any]:
    import ray

    from core.conversations import create_conversation

    actors = _conversations()
    setup = setup_store(store)
    pinger = ray.remote(Pinger).options(num_cpus=0).remote()  # type: ignore[attr-defined]
    await pinger.ping.remote()
    rtts = []
    for _ in range(args.turns):
        t0 = time.perf_counter()
        await pinger.ping.remote()
        rtts.append(time.perf_counter() - t0)
    progress(f"plain actor round trip p50 {ms(rtts)['p50']} ms")
    # A hook is an executor task: a plain Ray task from an actor is its floor.
    task_rtts = await pinger.task_rtts.remote(args.turns)
    progress(f"plain task round trip from an actor p50 {ms(task_rtts)['p50']} ms")
    # A hook on the pool is a call to a member from the conversation actor: its floor.
    hook_like = {"query": "m0", "recent_messages": [{"role": "user", "content": "m"}] * 20}
    member_rtts = await pinger.member_rtts.remote(args.turns, hook_like)
    progress(f"no-op call to a pool-shaped actor from an actor p50 {ms(member_rtts)['p50']} ms")

    results: dict[str, Any] = {
        "actor_rtt": ms(rtts),
        "task_rtt": ms(task_rtts),
        "member_rtt": ms(member_rtts),
    }
    # The series alternate in rounds, so a change of load on a shared machine hits them alike.
    series: dict[str, str] = {}
    samples: dict[str, list[float]] = {}
    acks: list[float] = []  # the both-hooks series' acknowledgements
    drains: list[float] = []  # the both-hooks series' extractions, stored after each round
    for name in ("hooks", "nohooks", "context", "extraction"):
        conv = create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agents"][name].id
        )
        await _actor_turns(conv.id, 10)  # warm: actor, executor workers, imports
        await extractions_stored(store, conv.id)
        series[name], samples[name] = conv.id, []
    _load("actor")
    for round_ in range(ROUNDS):
        for name, conv_id in series.items():
            share = args.turns // ROUNDS + (1 if round_ < args.turns % ROUNDS else 0)
            samples[name] += await _actor_turns(conv_id, share, acks if name == "hooks" else None)
            drained = await extractions_stored(store, conv_id)
            if name == "hooks":
                drains.append(drained)
    _load("actor")
    for name, values in samples.items():
        results[f"turn_{name}"] = ms(values)
        progress(f"turn via actor ({name}): {results[f'turn_{name}']}")
    results["turn_ack"] = ms(acks)
    results["extraction_drain"] = ms(drains)
    progress(f"extractions stored after each round (hooks): {results['extraction_drain']}")
    progress(f"ack via actor (hooks): {results['turn_ack']}")

    if args.pauses:
        _load("paused")
        paused = await _paused_turns(
            {"hooks": series["hooks"], "nohooks": series["nohooks"]},
            args.pauses,
            args.pause_min,
            args.pause_max,
        )
        _load("paused")
        for name, values in paused.items():
            results[f"paused_{name}"] = ms(values)
            progress(f"turn via actor after a pause ({name}): {results[f'paused_{name}']}")

    if not args.actor_only:
        _load("gateway")
        results.update(await _gateway_series(store, setup, port, args.turns))
        _load("gateway")

    results["bare_actor_start"] = ms(await _bare_actor_starts(args.reactivations))
    progress(f"bare detached actor create + first call (baseline): {results['bare_actor_start']}")
    results["reactivation"] = ms(await _reactivation(store, setup, args.reactivations))
    progress(f"re-activation of an evicted conversation: {results['reactivation']}")

    if args.conversations:
        progress(f"scale run: {args.conversations} conversations, cap {args.cap}")
        results["scale"] = await _scale(
            store, setup, args.conversations, args.cap, args.concurrency
        )
        progress(f"scale: {results['scale']}")
    await actors.configure_directory(max_resident=64)
    return results


class _OtlpSink:
    """An OTLP/HTTP receiver on 127.0.0.1 that accepts and discards (the export series)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def recording_series(turns: int) -> dict[str, Any]:
    """Turns with recording off, on, and on with OTLP export, alternating in rounds."""
    from harness import inprocess_cluster, setup_store, timed_turns

    from core import tracing
    from core.conversations import create_conversation
    from core.recording_setup import flush_records, install_recording, uninstall_recording
    from core.settings import settings_from_env
    from core.tracing_otlp import OtlpSpans

    cluster = inprocess_cluster()
    receiver = _OtlpSink()
    exporter = OtlpSpans("wonder-bench", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url})
    settings = settings_from_env(cluster.settings_env)
    setup = setup_store(cluster.store)
    conv = create_conversation(
        cluster.store, client_id=setup["client_id"], agent_id=setup["agents"]["hooks"].id
    )
    actor = cluster.actor(conv.id)
    modes = ("off", "on", "export")
    samples: dict[str, list[float]] = {mode: [] for mode in modes}

    def switch(mode: str) -> None:
        uninstall_recording()
        tracing.remove_exporter(exporter)
        if mode != "off":
            install_recording(cluster.store, settings, "bench")
        if mode == "export":
            tracing.add_exporter(exporter)

    try:
        for mode in modes:  # warm each: imports, the executor's services, the writer thread
            switch(mode)
            await timed_turns(actor, 5)
        for _ in range(turns):  # one turn of each in turn: load drifts hit all three alike
            for mode in modes:
                switch(mode)  # the previous mode's records are written before this turn
                samples[mode] += await timed_turns(actor, 1)
        flush_records()
        exporter.flush()
        calls = len(cluster.store.records.calls(conversation_id=conv.id, limit=100_000))
    finally:
        switch("off")
        exporter.processor.shutdown()
        receiver.close()
        cluster.close()
    results = {f"recording_{mode}": ms(values) for mode, values in samples.items()}
    for mode in modes:
        progress(f"turn, recording {mode}: {results[f'recording_{mode}']}")
    off = results["recording_off"]["p50"]
    return {
        "recording_off_p50_ms": off,
        "recording_on_p50_ms": results["recording_on"]["p50"],
        "recording_export_p50_ms": results["recording_export"]["p50"],
        "recording_added_p50_ms": round(results["recording_on"]["p50"] - off, 2),
        "recording_export_added_p50_ms": round(results["recording_export"]["p50"] - off, 2),
        "recording_on_p99_ms": results["recording_on"]["p99"],
        "recording_off_p99_ms": results["recording_off"]["p99"],
        "turns_per_series": len(samples["on"]),
        "model_calls_recorded": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per latency series")
    parser.add_argument("--reactivations", type=int, default=20)
    parser.add_argument("--conversations", type=int, default=2000, help="scale run size (0: skip)")
    parser.add_argument("--cap", type=int, default=50, help="resident conversation cap (scale run)")
    parser.add_argument("--concurrency", type=int, default=8, help="scale run concurrency")
    parser.add_argument(
        "--actor-only", action="store_true", help="skip the gateway WebSocket series"
    )
    parser.add_argument(
        "--pauses", type=int, default=20, help="turns after a pause, per series (0: skip)"
    )
    parser.add_argument("--pause-min", type=float, default=5.0, help="shortest pause (s)")
    parser.add_argument("--pause-max", type=float, default=30.0, help="longest pause (s)")
    parser.add_argument(
        "--recording",
        action="store_true",
        help="only the recording on/off/export series (in this process, no Ray)",
    )
    args = parser.parse_args()
    if args.recording:
        print(json.dumps(asyncio.run(recording_series(args.turns))))
        return

    with local_system(progress) as system:
        DASHBOARD["url"] = system.dashboard_url
        results = asyncio.run(main_async(args, system.store, system.port))

    summary = {
        "actor_rtt_p50_ms": results["actor_rtt"]["p50"],
        "task_rtt_from_actor_p50_ms": results["task_rtt"]["p50"],
        "member_call_from_actor_p50_ms": results["member_rtt"]["p50"],
        "turn_overhead_p50_ms": results["turn_hooks"]["p50"],
        "turn_overhead_p99_ms": results["turn_hooks"]["p99"],
        "turn_overhead_nohooks_p50_ms": results["turn_nohooks"]["p50"],
        "turn_overhead_nohooks_p99_ms": results["turn_nohooks"]["p99"],
        "turn_context_hook_p50_ms": results["turn_context"]["p50"],
        "turn_extraction_hook_p50_ms": results["turn_extraction"]["p50"],
        "turn_ack_p50_ms": results["turn_ack"]["p50"],
        "extraction_drain_p50_ms": results["extraction_drain"]["p50"],
        "failed_turns": len(FAILED),
        "reactivation_p50_ms": results["reactivation"]["p50"],
        "reactivation_p99_ms": results["reactivation"]["p99"],
        "bare_actor_start_p50_ms": results["bare_actor_start"]["p50"],
        "executor_pool_size": _pool_size(),
        "load_1m": LOADS,
    }
    if "paused_hooks" in results:
        summary.update(
            {
                "paused_turn_p50_ms": results["paused_hooks"]["p50"],
                "paused_turn_p99_ms": results["paused_hooks"]["p99"],
                "paused_turn_nohooks_p50_ms": results["paused_nohooks"]["p50"],
                "paused_turn_nohooks_p99_ms": results["paused_nohooks"]["p99"],
            }
        )
    if "gateway" in results:
        summary.update(
            {
                "gateway_turn_overhead_p50_ms": results["gateway"]["p50"],
                "gateway_turn_overhead_p99_ms": results["gateway"]["p99"],
                "gateway_turn_overhead_nohooks_p50_ms": results["gateway_nohooks"]["p50"],
                "gateway_reply_p50_ms": results["gateway_reply"]["p50"],
                "gateway_reply_p99_ms": results["gateway_reply"]["p99"],
                "gateway_reply_nohooks_p50_ms": results["gateway_reply_nohooks"]["p50"],
                "gateway_ack_p50_ms": results["gateway_ack"]["p50"],
                "gateway_frames_per_turn": round(sum(FRAMES.values()) / (3 * (args.turns + 10)), 1),
                "gateway_frames": FRAMES,
                "gateway_over_actor_p50": round(
                    results["gateway"]["p50"] / results["turn_hooks"]["p50"], 2
                ),
                "paired_actor_turn_p50_ms": results["paired_actor"]["p50"],
                "paired_gateway_turn_p50_ms": results["paired_gateway"]["p50"],
                "gateway_over_actor_paired_p50": round(
                    results["paired_gateway"]["p50"] / results["paired_actor"]["p50"], 2
                ),
            }
        )
    if "scale" in results:
        scale = results["scale"]
        summary.update(
            {
                "scale_conversations": scale["conversations"],
                "scale_cap": scale["cap"],
                "scale_elapsed_s": scale["elapsed_s"],
                "max_resident_actors": max(scale["peak_resident"], scale["max_alive_sampled"]),
            }
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
