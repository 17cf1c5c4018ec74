"""Open chats past the resident cap: N WebSockets held open on N conversations, cap far below N.

Starts its own local Ray and the gateway (``benchmarks.harness``) with
``WONDER_MAX_RESIDENT_CONVERSATIONS`` = ``--cap``; the agent is the zero-latency scripted echo
without hooks (the words do not matter). Every conversation gets a WebSocket
(``cluster.stream_client.ResumingStream``, the client docs/api.md describes) that stays open for
the whole run; then ``--rounds`` rounds, each sending one message on ``--per-round`` of the sockets
(default: all of them) at once and waiting until each is answered (``turn.completed`` on its
socket) or ``--turn-timeout`` passes. In one run:

- ``memory``: the RSS of the gateway replica and of the Serve proxy before the sockets open and
  once they are all open and idle, and the difference per socket (KiB); beside it the same for N
  sockets held open on a Serve WebSocket endpoint that does nothing (``activation.deploy_floor``),
  once the gateway's are closed: what Serve itself costs per open socket here (its replica's
  figure; the proxy's is a lower bound, it reuses what the gateway's sockets left);
- per round: answered, unanswered (no end within the timeout), failed turns, refused messages
  (error frames), answer latency (message frame → its ``turn.completed``) p50/p99, and how long
  the round took (activations/s: the round's messages ÷ its time, since every answered message
  to an evicted conversation is an activation);
- per socket at the end: breaks (must be 0), durable ``seq`` gaps and duplicates (must be 0),
  and how many sockets saw any;
- the directory's figures (activations, evictions, capacity refusals, peak residents) and the
  1-minute load average before and after.

The summary opens with ``every_message_answered`` and ``unanswered`` (every message of every
round not answered by ``turn.completed`` on its socket: unanswered in time, failed, refused or on
a broken socket; must be 0). Defaults (200 sockets, cap 8) run in minutes on a small machine;
``--sockets 1000 --cap 32`` is the larger run.

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from activation import deploy_floor, serve_pids
from harness import System, conversations, local_system, ms, reporter, rss_mib, setup_store

progress = reporter("open_sockets")
OPEN_AT_ONCE = 50  # sockets opened concurrently (the handshakes share one proxy and replica)


def gateway_rss(system: System, roles: tuple[str, ...] = ("gateway", "proxy")) -> dict[str, float]:
    """RSS (MiB) of the gateway replica and the Serve proxy (or the floor's replica)."""
    pids = serve_pids(system.dashboard_url)
    return {role: round(rss_mib(pids[role]), 1) for role in roles if role in pids}


def per_socket_kib(
    before: dict[str, float], after: dict[str, float], sockets: int
) -> dict[str, float]:
    return {
        role: round((after[role] - before[role]) * 1024 / max(1, sockets), 1)
        for role in after
        if role in before
    }


async def floor_sockets(system: System, n: int) -> dict[str, Any]:
    """``n`` sockets held open on the do-nothing Serve endpoint: its replica's and the proxy's
    RSS per socket."""
    import websockets

    deploy_floor(system)
    url = f"ws://127.0.0.1:{system.port}/floor/ws"
    before = gateway_rss(system, ("floor", "proxy"))
    gate = asyncio.Semaphore(OPEN_AT_ONCE)

    async def one() -> Any:
        async with gate:
            ws = await websockets.connect(url, open_timeout=120, proxy=None)
            await ws.send(json.dumps({"id": "hello"}))
            await ws.recv()
            return ws

    sockets = await asyncio.gather(*(one() for _ in range(n)))
    await asyncio.sleep(2.0)
    held = gateway_rss(system, ("floor", "proxy"))
    for ws in sockets:
        await ws.close()
    return {
        "rss_mib": {"before": before, "open": held},
        "kib_per_socket": per_socket_kib(before, held, n),
    }


async def open_all(streams: list[Any], timeout_s: float) -> list[str]:
    """Open every socket (``OPEN_AT_ONCE`` at a time); the failures, by conversation."""
    failures: list[str] = []
    gate = asyncio.Semaphore(OPEN_AT_ONCE)
    opened = 0

    async def one(stream: Any) -> None:
        nonlocal opened
        async with gate:
            try:
                await stream.open(timeout_s=timeout_s)
            except Exception as exc:  # counted, reported below
                failures.append(f"{stream.conversation_id}: {exc!r:.200}")
            opened += 1
            if opened % 100 == 0:
                progress(f"opened {opened}/{len(streams)} sockets")

    await asyncio.gather(*(one(s) for s in streams))
    return failures


async def one_round(streams: list[Any], number: int, timeout_s: float) -> dict[str, Any]:
    """One message on each of ``streams`` at once; wait for every answer."""
    t0 = time.perf_counter()
    frames = [await s.send(f"round {number} to {s.conversation_id}") for s in streams]
    done = 0

    async def wait(stream: Any, frame: str) -> tuple[str, float | None]:
        nonlocal done
        sent = time.monotonic()
        try:
            seen = await stream.wait_turn(frame, timeout_s)
        except TimeoutError:
            return "unanswered", None
        except Exception:  # a socket that broke: counted with the breaks
            return "broken", None
        done += 1
        if done % 100 == 0:
            progress(f"round {number}: {done}/{len(streams)} answered")
        ended_at = seen.ended_at or time.monotonic()
        return str(seen.ended), ended_at - sent

    results = await asyncio.gather(*(wait(s, f) for s, f in zip(streams, frames, strict=True)))
    elapsed = time.perf_counter() - t0
    latencies = [lat for kind, lat in results if kind == "turn.completed" and lat is not None]
    seen = [s.turns[f] for s, f in zip(streams, frames, strict=True)]
    refused = sum(1 for turn in seen if turn.refusals and not turn.acked)
    return {
        "messages": len(streams),
        "answered": len(latencies),
        "unanswered": sum(1 for kind, _lat in results if kind == "unanswered"),
        "broken": sum(1 for kind, _lat in results if kind == "broken"),
        "failed_turns": sum(1 for kind, _lat in results if kind == "turn.failed"),
        "refused": refused,
        "answer": ms(latencies) if latencies else None,
        "elapsed_s": round(elapsed, 1),
        "messages_per_s": round(len(latencies) / elapsed, 2),
    }


async def main_async(args: argparse.Namespace, system: System) -> dict[str, Any]:
    from cluster.stream_client import ResumingStream
    from core.conversations import create_conversation

    setup = setup_store(system.store)
    agent_id = setup["agents"]["nohooks"].id
    convs = [
        create_conversation(system.store, client_id=setup["client_id"], agent_id=agent_id).id
        for _ in range(args.sockets)
    ]
    base_url = f"http://127.0.0.1:{system.port}"
    streams = [ResumingStream(base_url, setup["key"], c, max_reconnects=0) for c in convs]
    before = gateway_rss(system)
    progress(f"opening {len(streams)} sockets (gateway RSS before: {before})")
    t0 = time.perf_counter()
    open_failures = await open_all(streams, args.turn_timeout)
    opened_s = time.perf_counter() - t0
    await asyncio.sleep(2.0)  # let the open burst settle before reading memory
    idle = gateway_rss(system)
    open_streams = [s for s in streams if s._ws is not None]
    per_socket = per_socket_kib(before, idle, len(open_streams))
    progress(f"{len(open_streams)} open in {opened_s:.1f}s; RSS {idle}; KiB/socket {per_socket}")
    rounds = []
    for number in range(args.rounds):
        chosen = open_streams[: args.per_round] if args.per_round else open_streams
        progress(f"round {number}: {len(chosen)} messages")
        rounds.append(await one_round(chosen, number, args.turn_timeout))
        progress(f"round {number}: {rounds[-1]}")
    after = gateway_rss(system)
    per_socket_seqs = [stream.gaps_and_duplicates() for stream in streams]
    gaps = sum(missing for missing, _twice in per_socket_seqs)
    dups = sum(twice for _missing, twice in per_socket_seqs)
    breaks = sum(len(s.breaks) for s in streams)
    for stream in streams:
        await stream.close()
    stats = await conversations(system.env).directory_stats()
    # After the gateway's sockets closed: the proxy is shared, so its figure here reuses memory
    # the gateway's sockets left (a lower bound); the floor's replica is a process of its own.
    floor = await floor_sockets(system, args.sockets)
    progress(f"Serve floor: {args.sockets} idle sockets: {floor}")
    return {
        "sockets": args.sockets,
        "opened": len(open_streams),
        "open_failures": open_failures[:5],
        "open_s": round(opened_s, 1),
        "gateway_rss_mib": {"before": before, "idle_open": idle, "after_rounds": after},
        "gateway_kib_per_idle_socket": per_socket,
        "serve_floor": floor,
        "rounds": rounds,
        "gaps": gaps,
        "duplicates": dups,
        "sockets_with_gaps": sum(1 for missing, _twice in per_socket_seqs if missing),
        "sockets_with_duplicates": sum(1 for _missing, twice in per_socket_seqs if twice),
        "max_gaps_per_socket": max((missing for missing, _twice in per_socket_seqs), default=0),
        "max_duplicates_per_socket": max((twice for _m, twice in per_socket_seqs), default=0),
        "breaks": breaks,
        "directory": {k: v for k, v in stats.items() if k not in ("conversations", "nodes")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sockets", type=int, default=200, help="open WebSockets, one conversation each"
    )
    parser.add_argument(
        "--cap", type=int, default=8, help="resident conversation cap (e.g. 1000 sockets, cap 32)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--per-round", type=int, default=0, help="messages per round (default: every socket)"
    )
    parser.add_argument(
        "--turn-timeout",
        type=float,
        default=1800.0,
        help="seconds each message may wait for its answer before it counts as unanswered",
    )
    parser.add_argument(
        "--max-starting",
        type=int,
        default=None,
        help="conversation actors starting at once (default: the settings' default)",
    )
    args = parser.parse_args()
    settings = {"WONDER_MAX_RESIDENT_CONVERSATIONS": str(args.cap)}
    if args.max_starting is not None:
        settings["WONDER_MAX_STARTING_CONVERSATIONS"] = str(args.max_starting)
    load_before = os.getloadavg()[0]
    with local_system(progress, **settings) as system:
        results = asyncio.run(main_async(args, system))
    load_after = os.getloadavg()[0]
    rounds = results["rounds"]
    messages = sum(r["messages"] for r in rounds)
    unanswered = sum(r["messages"] - r["answered"] for r in rounds)
    summary: dict[str, Any] = {
        "every_message_answered": unanswered == 0 and results["opened"] == results["sockets"],
        "messages": messages,
        "unanswered": unanswered,
        "sockets": results["sockets"],
        "opened": results["opened"],
        "cap": args.cap,
        "gateway_kib_per_idle_socket": results["gateway_kib_per_idle_socket"],
        "serve_floor_kib_per_idle_socket": results["serve_floor"]["kib_per_socket"],
        "rounds": [
            {
                "messages": r["messages"],
                "answered": r["answered"],
                "unanswered": r["messages"] - r["answered"],
                "failed_turns": r["failed_turns"],
                "refused": r["refused"],
                "answer_p50_ms": (r["answer"] or {}).get("p50"),
                "answer_p99_ms": (r["answer"] or {}).get("p99"),
                "elapsed_s": r["elapsed_s"],
            }
            for r in results["rounds"]
        ],
        "gaps": results["gaps"],
        "duplicates": results["duplicates"],
        "sockets_with_gaps": results["sockets_with_gaps"],
        "sockets_with_duplicates": results["sockets_with_duplicates"],
        "breaks": results["breaks"],
        "evictions": results["directory"].get("evictions"),
        "peak_resident": results["directory"].get("peak_resident"),
        "load_1m_before_after": [round(load_before, 1), round(load_after, 1)],
    }
    print(json.dumps({"detail": results}, default=str))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
