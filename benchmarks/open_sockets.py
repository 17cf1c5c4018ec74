"""Open chats past the resident cap: N WebSockets held open on N conversations, cap far below N.

Starts its own local Ray and the gateway (``benchmarks.harness``) with
``WONDER_MAX_RESIDENT_CONVERSATIONS`` = ``--cap``; the agent is the zero-latency scripted echo
without hooks (the words do not matter). Every conversation gets a WebSocket
(``cluster.stream_client.ResumingStream``, the client docs/api.md describes) that stays open for
the whole run; then ``--rounds`` rounds, each sending one message on ``--per-round`` of the sockets
(default: all of them) at once and waiting until each is answered (``turn.completed`` on its
socket) or ``--turn-timeout`` passes. In one run:

- ``memory``: the RSS of the gateway replica and of the Serve proxy before the sockets open and
  once they are all open and idle, and the difference per socket (KiB);
- per round: answered, unanswered (no end within the timeout), failed turns, refused messages
  (error frames), answer latency (message frame → its ``turn.completed``) p50/p99, and how long
  the round took (activations/s: the round's messages ÷ its time, since every answered message
  to an evicted conversation is an activation);
- per socket at the end: breaks (must be 0), durable ``seq`` gaps and duplicates (must be 0);
- the directory's figures (activations, evictions, capacity refusals, peak residents) and the
  1-minute load average before and after.

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from activation import serve_pids
from harness import System, conversations, local_system, ms, reporter, rss_mib, setup_store

progress = reporter("open_sockets")
OPEN_AT_ONCE = 50  # sockets opened concurrently (the handshakes share one proxy and replica)


def gateway_rss(system: System) -> dict[str, float]:
    """RSS (MiB) of the gateway replica and the Serve proxy."""
    pids = serve_pids(system.dashboard_url)
    return {role: round(rss_mib(pids[role]), 1) for role in ("gateway", "proxy") if role in pids}


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
    per_socket = {
        role: round((idle[role] - before[role]) * 1024 / max(1, len(open_streams)), 1)
        for role in idle
        if role in before
    }
    progress(f"{len(open_streams)} open in {opened_s:.1f}s; RSS {idle}; KiB/socket {per_socket}")
    rounds = []
    for number in range(args.rounds):
        chosen = open_streams[: args.per_round] if args.per_round else open_streams
        progress(f"round {number}: {len(chosen)} messages")
        rounds.append(await one_round(chosen, number, args.turn_timeout))
        progress(f"round {number}: {rounds[-1]}")
    after = gateway_rss(system)
    gaps = dups = 0
    for stream in streams:
        missing, twice = stream.gaps_and_duplicates()
        gaps, dups = gaps + missing, dups + twice
    breaks = sum(len(s.breaks) for s in streams)
    for stream in streams:
        await stream.close()
    stats = await conversations(system.env).directory_stats()
    return {
        "sockets": args.sockets,
        "opened": len(open_streams),
        "open_failures": open_failures[:5],
        "open_s": round(opened_s, 1),
        "gateway_rss_mib": {"before": before, "idle_open": idle, "after_rounds": after},
        "gateway_kib_per_idle_socket": per_socket,
        "rounds": rounds,
        "gaps": gaps,
        "duplicates": dups,
        "breaks": breaks,
        "directory": {k: v for k, v in stats.items() if k not in ("conversations", "nodes")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=1000, help="open WebSockets, one each")
    parser.add_argument("--cap", type=int, default=32, help="resident conversation cap")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--per-round", type=int, default=0, help="messages per round (default: every socket)"
    )
    parser.add_argument("--turn-timeout", type=float, default=3600.0, help="seconds per answer")
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
    summary: dict[str, Any] = {
        "sockets": results["sockets"],
        "opened": results["opened"],
        "cap": args.cap,
        "gateway_kib_per_idle_socket": results["gateway_kib_per_idle_socket"],
        "rounds": [
            {
                "messages": r["messages"],
                "answered": r["answered"],
                "unanswered": r["unanswered"],
                "answer_p50_ms": (r["answer"] or {}).get("p50"),
                "answer_p99_ms": (r["answer"] or {}).get("p99"),
                "elapsed_s": r["elapsed_s"],
            }
            for r in results["rounds"]
        ],
        "gaps": results["gaps"],
        "duplicates": results["duplicates"],
        "breaks": results["breaks"],
        "evictions": results["directory"].get("evictions"),
        "peak_resident": results["directory"].get("peak_resident"),
        "load_1m_before_after": [round(load_before, 1), round(load_after, 1)],
    }
    print(json.dumps({"detail": results}, default=str))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
