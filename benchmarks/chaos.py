"""Turns that survive their actors, under fire.

Starts its own local Ray and the gateway (``benchmarks.harness``). Two parts, one run:

- ``mid_turn_kills``: K conversations (default 20), one after the other; each turn calls a tool
  that is *not* idempotent (it appends a line to a file, then works for 2 s); while it runs, the
  conversation actor's process is killed with SIGKILL. Counted: turns answered on the same turn
  (completed, exactly one answer), duplicate tool effects (lines beyond one), event streams with a
  gap or a duplicate, and the time from the kill to the answer (p50/p99).
- ``load``: C conversations (default 50) x T turns (default 10), each driven by its own WebSocket
  client (send, wait for ``turn.completed``, next), while a conversation actor picked at random
  among the resident ones is killed every S seconds (default 3). Counted: turns completed, turns
  failed, kills, and for every conversation its durable event stream as the client saw it (from
  seq 1 across every reconnect the gateway makes for it): gaps and duplicates; and why each client
  stream broke (a close by the server with its code and error frame, or 30 s of silence, with
  whether the store then held events the client had not seen).

Prints progress, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import System, conversations, local_system, ms, reporter, setup_store

progress = reporter("chaos")


def _tool_agent(system: System, client_id: str, effects: Path, n: int) -> str:
    """An agent whose turn calls a non-idempotent tool counting its runs in ``effects`` (it
    works for 2 s the first time), then answers with its result."""
    from core.domain import (
        Agent,
        ModelProfile,
        Persona,
        PersonaRef,
        ScriptStep,
        TaskAction,
        TaskDef,
        Tool,
    )
    from core.ids import new_id, utc_now

    store = system.store
    store.tasks.put(
        TaskDef(
            id="chaos-count",
            actions=[
                TaskAction(kind="python", params={"callable": "tests.callables:count_then_wait"})
            ],
        ),
        utc_now(),
    )
    store.tools.put(
        Tool(
            id="chaos-count",
            name="count",
            description="count a run",
            target_type="task",
            target_id="chaos-count",
        ),
        utc_now(),
    )
    script = [
        ScriptStep.model_validate(step)
        for step in (
            {"match": "restarted before its result", "reply": "interrupted; not retried"},
            {"match": "runs", "reply": "done: {{last_tool}}"},
            {
                "match": "count",
                "tool_calls": [
                    {"name": "count", "arguments": {"path": str(effects), "seconds": 2}}
                ],
            },
        )
    ]
    store.model_profiles.put(
        ModelProfile(id=f"chaos-script-{n}", provider="scripted", model="script", script=script),
        utc_now(),
    )
    persona = store.personas.put(
        Persona(
            id=f"chaos-tool-{n}",
            system_prompt="You count.",
            model_profile_id=f"chaos-script-{n}",
            tool_ids=["chaos-count"],
        ),
        utc_now(),
    )
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name="counter",
        persona_ref=PersonaRef(id=persona.id),
        created_at=utc_now(),
    )
    return store.agents.insert(agent).id


async def _until(predicate: Any, timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        await asyncio.sleep(interval)
    raise TimeoutError("condition not met in time")


def _gap_free(seqs: list[int]) -> tuple[int, int]:
    """(gaps, duplicates) in a sequence that should be 1, 2, 3, ..."""
    duplicates = len(seqs) - len(set(seqs))
    unique = sorted(set(seqs))
    gaps = sum(1 for a, b in itertools.pairwise(unique) if b != a + 1)
    gaps += 1 if unique and unique[0] != 1 else 0
    return gaps, duplicates


async def mid_turn_kills(system: System, client_id: str, n: int) -> dict[str, Any]:
    from core.conversations import create_conversation
    from core.domain import MessageRole, TurnStatus

    port = conversations(system.env)
    work = Path(tempfile.mkdtemp(prefix="chaos-effects-"))
    answered = lost = duplicate_effects = stream_faults = 0
    recovery: list[float] = []
    for i in range(n):
        effects = work / f"{i}.txt"
        agent_id = _tool_agent(system, client_id, effects, i)
        conv = create_conversation(system.store, client_id=client_id, agent_id=agent_id).id
        ack = await port.post_message(conv, "count, please", "u")
        await _until(effects.exists, 60)
        status = await port.status(conv)
        os.kill(int(status["pid"]), signal.SIGKILL)
        killed = time.perf_counter()

        def ended(turn_id: str = ack.turn_id) -> bool:
            return system.store.turns.get(turn_id).status is not TurnStatus.ACTIVE

        try:
            await _until(ended, 120)
        except TimeoutError:
            lost += 1
            continue
        recovery.append(time.perf_counter() - killed)
        turn = system.store.turns.get(ack.turn_id)
        answers = [
            m
            for m in system.store.messages.list(conv, turn_ids=[ack.turn_id])
            if m.role is MessageRole.AGENT
        ]
        if turn.status is TurnStatus.COMPLETED and len(answers) == 1:
            answered += 1
        else:
            lost += 1
        await asyncio.sleep(2.5)  # the cut tool run finishes in the executor meanwhile
        duplicate_effects += max(0, len(effects.read_text().splitlines()) - 1)
        gaps, dups = _gap_free([e.seq for e in system.store.events.list(conv)])
        stream_faults += gaps + dups
        progress(f"kill {i + 1}/{n}: {turn.status.value} in {recovery[-1]:.2f}s")
    return {
        "kills": n,
        "answered_on_the_same_turn": answered,
        "lost": lost,
        "duplicate_tool_effects": duplicate_effects,
        "stream_gaps_or_duplicates": stream_faults,
        "kill_to_answer": ms(recovery),
    }


async def _client(system: System, key: str, conv: str, turns: int) -> dict[str, Any]:
    """T turns on one WebSocket; a stream that breaks (closed, or silent for 30 s) is reopened
    after the last seq seen (docs/api.md), and an unacknowledged message sent again (same id).

    A turn's end can reach the client before its ``ack`` does (a message sent again after a
    reconnect is acknowledged once its turn may have ended): every end seen is kept by turn id."""
    import websockets

    base = f"ws://127.0.0.1:{system.port}/v1/conversations/{conv}/stream"
    headers = {"Authorization": f"Bearer {key}"}
    seqs: list[int] = []
    ended: dict[str, str] = {}  # turn id -> turn.completed | turn.failed, as seen
    outcomes: list[str] = []
    reconnects = 0
    n, turn_id, sent = 0, None, False
    breaks: list[str] = []  # why each stream ended: close code and the error frame, or silence
    error: str | None = None
    while n < turns and reconnects <= 50:
        after = seqs[-1] if seqs else 0
        try:
            async with websockets.connect(
                f"{base}?after_seq={after}",
                additional_headers=headers,
                max_size=None,
                open_timeout=60,
            ) as ws:
                while n < turns:
                    if not sent:
                        message = {"type": "message", "content": f"turn {n}", "id": f"m{n}"}
                        await ws.send(json.dumps(message))
                        sent = True
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if frame.get("seq") is not None:
                        seqs.append(int(frame["seq"]))
                    kind = frame.get("type")
                    if kind == "ack":
                        turn_id = frame.get("turn_id")
                    elif kind in ("turn.completed", "turn.failed"):
                        ended[str(frame.get("turn_id"))] = kind
                    elif kind == "error":
                        error = str((frame.get("error") or {}).get("message"))[:160]
                        if turn_id is None:
                            sent = False  # not acknowledged: send it again (same id)
                    if turn_id is not None and turn_id in ended:
                        outcomes.append(ended[turn_id])
                        n, turn_id, sent = n + 1, None, False
        except (TimeoutError, OSError, websockets.exceptions.ConnectionClosed) as exc:
            if isinstance(exc, websockets.exceptions.ConnectionClosed):
                code = exc.rcvd.code if exc.rcvd is not None else None
                breaks.append(f"closed {code}: {error}")
            else:  # silent: was there something to deliver (a stuck stream) or not (slow)?
                stored = system.store.events.last_seq(conv)
                behind = "events pending" if stored > (seqs[-1] if seqs else 0) else "nothing new"
                breaks.append(f"{type(exc).__name__} ({behind}; turn {n} acked: {bool(turn_id)})")
            reconnects += 1
            if turn_id is None:
                sent = False  # the ack may be lost: the same id is acknowledged once
        error = None
    gaps, duplicates = _gap_free(seqs)
    return {
        "completed": outcomes.count("turn.completed"),
        "failed": outcomes.count("turn.failed"),
        "gaps": gaps,
        "duplicates": duplicates,
        "reconnects": reconnects,
        "breaks": breaks,
    }


async def load(
    system: System, setup: dict[str, Any], size: int, turns: int, every_s: float
) -> dict[str, Any]:
    from core.conversations import create_conversation

    agent_id = setup["agents"]["nohooks"].id
    convs = [
        create_conversation(system.store, client_id=setup["client_id"], agent_id=agent_id).id
        for _ in range(size)
    ]
    port = conversations(system.env)
    stop = asyncio.Event()
    kills = 0
    rng = random.Random(12)

    async def killer() -> None:
        # On a fixed cadence (a slow kill does not delay the next), a conversation whose actor is
        # up (asking the directory starts nothing; asking the actor for its pid would start a
        # cold one and wait for it).
        nonlocal kills
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not stop.is_set():
            next_at += every_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            for conv in rng.sample(convs, len(convs)):
                try:
                    if not await port.is_ready(conv):
                        continue
                    status = await asyncio.wait_for(port.status(conv), 5)
                    os.kill(int(status["pid"]), signal.SIGKILL)
                except Exception:
                    continue
                kills += 1
                break

    started = time.perf_counter()
    chaos = asyncio.create_task(killer())
    results = await asyncio.gather(
        *(_client(system, setup["key"], c, turns) for c in convs), return_exceptions=True
    )
    stop.set()
    await chaos
    elapsed = time.perf_counter() - started
    ok = [r for r in results if isinstance(r, dict)]
    broken = [repr(r)[:200] for r in results if not isinstance(r, dict)]
    return {
        "conversations": size,
        "turns": size * turns,
        "completed": sum(r["completed"] for r in ok),
        "failed": sum(r["failed"] for r in ok),
        "clients_broken": len(broken),
        "broken": broken[:3],
        "kills": kills,
        "client_reconnects": sum(r["reconnects"] for r in ok),
        "reconnect_reasons": dict(
            collections.Counter(b.split(":")[0] for r in ok for b in r["breaks"]).most_common()
        ),
        "break_samples": sorted({b for r in ok for b in r["breaks"]})[:12],
        "gaps": sum(r["gaps"] for r in ok),
        "duplicates": sum(r["duplicates"] for r in ok),
        "elapsed_s": round(elapsed, 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    # The counting tool is a test callable (tests/callables.py): Ray's workers import it from
    # the repository's root.
    root = str(Path(__file__).resolve().parent.parent)
    callables = '["tests.callables"]'
    with local_system(progress, WONDER_LIBRARY_CALLABLES=callables, PYTHONPATH=root) as system:
        setup = setup_store(system.store)
        progress(f"mid-turn kills: {args.kills}")
        kills = await mid_turn_kills(system, setup["client_id"], args.kills) if args.kills else {}
        progress(f"load: {args.conversations} conversations x {args.turns} turns")
        loaded = await load(system, setup, args.conversations, args.turns, args.kill_every)
        return {"benchmark": "chaos", "mid_turn_kills": kills, "load": loaded}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--kill-every", type=float, default=3.0)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
