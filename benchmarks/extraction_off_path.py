"""Memory extraction off the turn's path: a turn whose persona's extraction
hook is slow completes as fast as one without it.

In one process, without Ray (``tests.inprocess``: the production ConversationActor, executor and
store; only the runtime is replaced), so what is measured is the actor's ordering, not Ray's
noise on a loaded machine. Two personas on a zero-latency scripted echo: ``none`` (no hooks) and
``slow_extraction`` (a memory extraction hook that takes ``--extraction-ms``). A turn = message
posted → turn completed, turns back to back, the two alternating in rounds. Before extraction ran
after completion, the second series paid the hook's time on every turn.

Prints ONE JSON object: p50/p99 of each series (ms), the difference of the p50s, and the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from harness import extractions_stored, inprocess_cluster, ms, timed_turns

SLOW = "benchmarks.extraction_off_path:slow_extraction"


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from core.callables import register
    from core.conversations import create_conversation
    from core.domain import Agent, Client, ModelProfile, Persona, PersonaRef, TaskAction, TaskDef
    from core.ids import new_id, utc_now

    async def slow_extraction(data: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(args.extraction_ms / 1000)
        return {}

    register(SLOW, slow_extraction)
    cluster = inprocess_cluster()
    store = cluster.store
    client = store.clients.insert(Client(id=new_id("client"), name="bench", created_at=utc_now()))
    store.model_profiles.put(
        ModelProfile(id="bench-echo", provider="scripted", model="echo"), utc_now()
    )
    task = TaskDef(
        id="bench-slow-extract", actions=[TaskAction(kind="python", params={"callable": SLOW})]
    )
    store.tasks.put(task, utc_now())
    conversations = {}
    for name, extraction in (("none", None), ("slow_extraction", task.id)):
        persona = Persona(
            id=f"bench-{name}",
            system_prompt="You echo.",
            model_profile_id="bench-echo",
            memory_extraction_task_id=extraction,
        )
        store.personas.put(persona, utc_now())
        agent = Agent(
            id=new_id("agent"),
            client_id=client.id,
            name=name,
            persona_ref=PersonaRef(id=persona.id),
            created_at=utc_now(),
        )
        store.agents.insert(agent)
        conv = create_conversation(store, client_id=client.id, agent_id=agent.id)
        conversations[name] = conv.id
        await timed_turns(cluster.actor(conv.id), 3)  # warm
    samples: dict[str, list[float]] = {name: [] for name in conversations}
    for _ in range(args.rounds):
        for name, conversation_id in conversations.items():
            samples[name] += await timed_turns(cluster.actor(conversation_id), args.turns)
    for conversation_id in conversations.values():  # the last extractions end
        await extractions_stored(store, conversation_id)
    return {name: ms(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extraction-ms", type=float, default=200.0)
    parser.add_argument("--turns", type=int, default=15, help="turns per series and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = asyncio.run(main_async(args))
    summary = {
        "extraction_hook_ms": args.extraction_ms,
        "turn_no_hooks_p50_ms": results["none"]["p50"],
        "turn_no_hooks_p99_ms": results["none"]["p99"],
        "turn_slow_extraction_p50_ms": results["slow_extraction"]["p50"],
        "turn_slow_extraction_p99_ms": results["slow_extraction"]["p99"],
        "extraction_adds_p50_ms": round(
            results["slow_extraction"]["p50"] - results["none"]["p50"], 2
        ),
        "load_1m_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
