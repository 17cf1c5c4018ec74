"""What the hooks cost a turn besides Ray: store statements and time, in one process.

Without Ray (``tests.inprocess``: the production ConversationActor, executor and store in this
process; only the runtime is replaced), so the figures are Wonder's own work, not Ray's noise on a
loaded machine. Two agents on a zero-latency scripted echo (``harness.setup_store``): ``hooks``
(a context-assembly task that reads the conversation's context, a memory-extraction task that
writes it) and ``nohooks``. Turns back to back, the two series alternating in rounds. Figures:

- ``statements_per_turn_*``: SQL statements the store ran per turn (the actor's and the hook
  tasks'), counted on the engine, extraction included;
- ``turn_*_p50/p99_ms``: message posted → turn completed (extractions wait for a quiet moment,
  as on Ray: after each round, which waits for them before the next);
- ``setup_read_us``: the agent's setup as a turn gets it (``TurnSteps.load_setup``, unchanged
  library), ``hook_task_read_us``: one hook task read from the library, ``hook_input_us``: the
  context hook's input built (each the best of 5 rounds of 300 calls).

Prints ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Callable
from typing import Any

from harness import extractions_stored, inprocess_cluster, ms, setup_store, timed_turns


def best_us(fn: Callable[[], object], n: int = 300) -> float:
    """Min over 5 rounds of the mean time of ``n`` calls, in µs."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return round(min(rounds), 1)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from sqlalchemy import event

    from actors.conversation.context import assemble_context
    from core.conversations import create_conversation

    cluster = inprocess_cluster()
    store = cluster.store
    setup = setup_store(store)
    statements = [0]
    polling = [False]  # this script's own reads are not counted

    def count(*_: Any) -> None:
        if not polling[0]:
            statements[0] += 1

    event.listen(store.db.engine, "before_cursor_execute", count)
    actors = {}
    for name in ("hooks", "nohooks"):
        conv = create_conversation(
            store, client_id=setup["client_id"], agent_id=setup["agents"][name].id
        )
        actors[name] = cluster.actor(conv.id)
        await timed_turns(actors[name], 5)  # warm
    samples: dict[str, list[float]] = {name: [] for name in actors}
    counted: dict[str, int] = dict.fromkeys(actors, 0)
    for _ in range(args.rounds):
        for name, actor in actors.items():
            await extractions_stored(store, actor.id, polling)  # its warm-up's are not counted
            before = statements[0]
            samples[name] += await timed_turns(actor, args.turns)
            await extractions_stored(store, actor.id, polling)  # this round's are counted
            counted[name] += statements[0] - before
    n = args.turns * args.rounds

    steps = actors["hooks"].steps
    agent_setup = steps.load_setup(None)
    turn = store.turns.list(steps.conversation_id)[-1]
    history = store.messages.list(steps.conversation_id)[-20:]
    default = assemble_context(
        agent_setup.persona,
        agent_setup.profile,
        history,
        agent_setup.catalog,
        agent_setup.agent.id,
        None,
        None,
        False,
    )
    client_id = setup["client_id"]
    results = {name: ms(values) for name, values in samples.items()}
    return {
        "statements_per_turn_hooks": round(counted["hooks"] / n, 1),
        "statements_per_turn_nohooks": round(counted["nohooks"] / n, 1),
        "turn_hooks_p50_ms": results["hooks"]["p50"],
        "turn_hooks_p99_ms": results["hooks"]["p99"],
        "turn_nohooks_p50_ms": results["nohooks"]["p50"],
        "turn_nohooks_p99_ms": results["nohooks"]["p99"],
        "hooks_add_p50_ms": round(results["hooks"]["p50"] - results["nohooks"]["p50"], 2),
        "setup_read_us": best_us(lambda: steps.load_setup(None)),
        "hook_task_read_us": best_us(lambda: store.tasks.get("bench-context", client_id=client_id)),
        "hook_input_us": best_us(
            lambda: steps._hook_input(turn, agent_setup, history, [], default)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50, help="turns per series and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    summary = asyncio.run(main_async(args))
    summary["load_1m_before_after"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
