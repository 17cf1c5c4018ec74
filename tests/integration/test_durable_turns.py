"""Turns that survive their actor (issue 12, item 1): kill -9 of a conversation actor's process
mid-turn on a real local Ray; the restarted actor resumes the turn and answers it, once.

The pure rules are tested in tests/unit/test_conversation_resumption.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from actors.conversation.resumption import MAX_INTERRUPTIONS
from core.domain import MessageRole, ModelProfile, Tool, TurnStatus
from core.ids import utc_now
from core.store import Store
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import conversations, post

pytestmark = pytest.mark.timeout(120)


async def _ended(cluster: Cluster, turn_id: str) -> TurnStatus:
    def status() -> TurnStatus | None:
        found = cluster.store.turns.get(turn_id).status
        return None if found is TurnStatus.ACTIVE else found

    return await async_wait_for(status, timeout=60, interval=0.2)


def _use_profile(store: Store, agent_id: str, profile: ModelProfile) -> None:
    agent = store.agents.get(agent_id)
    assert agent.persona_ref is not None
    persona = store.personas.get(agent.persona_ref.id)
    store.personas.put(persona.model_copy(update={"model_profile_id": profile.id}), utc_now())


def _answers(store: Store, conversation_id: str) -> list[str]:
    return [m.content for m in store.messages.list(conversation_id) if m.role is MessageRole.AGENT]


async def _thinking(conversation_id: str, turn_id: str, timeout: float = 30.0) -> int:
    """The pid of the actor once its model call for ``turn_id`` runs."""
    deadline = time.monotonic() + timeout
    while True:
        status = await conversations().status(conversation_id)
        if status["live_turns"].get(turn_id) == "thinking":
            return int(status["pid"])
        assert time.monotonic() < deadline, f"turn {turn_id} never reached its model call"
        await asyncio.sleep(0.05)


async def _kill(conversation_id: str) -> None:
    status = await conversations().status(conversation_id)
    os.kill(status["pid"], signal.SIGKILL)


async def test_kill_9_mid_model_call_answers_on_the_same_turn(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store, [{"reply": "x", "delay_s": 60}]))
    conv = make_conversation(store, client_id, agent)
    seen: list[dict[str, Any]] = []

    async def listen(after: int) -> None:
        async for event in conversations().stream_events(conv.id, after):
            if event["seq"] is not None:
                seen.append(event)
            if event["type"] == "turn.completed":
                return

    # The stream outlives the actor: the relay re-subscribes after the last seq it handed out.
    listener = asyncio.create_task(listen(0))
    ack = await post(conv.id, "this must survive", "u")
    await async_wait_for(lambda: any(e["type"] == "message" for e in seen), timeout=30)
    # The message is stored at once; its turn may start in an actor only a moment later.
    pid = await _thinking(conv.id, ack.turn_id)
    _use_profile(store, agent.id, scripted_profile(store))  # the model answers fast from now on
    os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(listener, 60)

    assert await _ended(ray_cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert _answers(store, conv.id) == ["echo: this must survive"]
    seqs = [e["seq"] for e in seen]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate across the reconnect
    types = [e["type"] for e in seen]
    assert types.count("turn.resumed") == 1 and types.count("turn.completed") == 1
    assert [e["turn_id"] for e in seen if e["type"] == "turn.resumed"] == [ack.turn_id]


def _counting_tool(store: Store, idempotent: bool) -> Tool:
    return task_tool(
        store,
        "count",
        [{"kind": "python", "params": {"callable": "tests.callables:count_then_wait"}}],
        idempotent=idempotent,
    )


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-idempotent", "idempotent"])
async def test_kill_9_mid_tool_call_reruns_it_only_when_idempotent(
    ray_cluster: Cluster, tmp_path: Path, idempotent: bool
) -> None:
    store = ray_cluster.store
    effects = tmp_path / "effects"
    call = {"name": "count", "arguments": {"path": str(effects), "seconds": 60}}
    script = [
        {"match": "go", "tool_calls": [call]},
        {"match": "restarted before its result", "reply": "it was interrupted, not retrying"},
        {"match": "runs", "reply": "done: {{last_tool}}"},
    ]
    client_id, _ = make_client(store)
    tool = _counting_tool(store, idempotent)
    agent = make_agent(store, client_id, scripted_profile(store, script), [tool])
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "go", "u")
    await async_wait_for(effects.exists, timeout=60, interval=0.1)  # the tool is running
    await _kill(conv.id)

    assert await _ended(ray_cluster, ack.turn_id) is TurnStatus.COMPLETED
    [move, _answer] = store.moves.list(ack.turn_id)
    assert move.tool_result is not None
    runs = len(effects.read_text().splitlines())
    if idempotent:
        assert runs == 2 and move.tool_result.success
        assert _answers(store, conv.id) == ['done: {"runs": 2}']
    else:
        assert runs == 1 and not move.tool_result.success  # never run a second time
        assert _answers(store, conv.id) == ["it was interrupted, not retrying"]
    events = store.events.list(conv.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("turn.resumed") == 1


async def test_a_turn_killed_too_often_fails_with_a_clear_reason(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store, [{"reply": "x", "delay_s": 60}]))
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "doomed", "u")
    for n in range(1, MAX_INTERRUPTIONS + 1):
        await _kill(conv.id)

        def resumed(n: int = n) -> bool:
            return [e.type for e in store.events.list(conv.id)].count("turn.resumed") == n

        await async_wait_for(resumed, timeout=60, interval=0.2)
    await _kill(conv.id)
    assert await _ended(ray_cluster, ack.turn_id) is TurnStatus.FAILED
    turn = store.turns.get(ack.turn_id)
    assert turn.failure_reason is not None and turn.failure_reason.startswith("interrupted: ")
    assert f"{MAX_INTERRUPTIONS + 1} times" in turn.failure_reason
