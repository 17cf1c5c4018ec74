"""The Conversation actor's shell in one process, over its real collaborators (store, executor,
async-operations runner, scripted models) handed in as ports: no Ray. Each test drives real actors
through ``tests.inprocess.InProcessCluster``; the Ray adapters are tested in tests/integration."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.conversation import steps
from core.domain import (
    ConcurrencyPolicy,
    MessageRole,
    OperationStatus,
    TurnStatus,
)
from core.retry import RetryPolicy
from core.store import Store
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessCluster]:
    monkeypatch.setattr(steps, "LLM_CALL", RetryPolicy(3, (0.01, 0.01), 5.0))
    monkeypatch.setattr(steps, "CONTEXT_ASSEMBLY", RetryPolicy(3, (0.01, 0.01), 5.0))
    monkeypatch.setattr(steps, "MEMORY_EXTRACTION", RetryPolicy(3, (0.01, 0.01), 5.0))
    yield InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})


def conversation(store: Store, script: list[dict[str, Any]] | None, **persona: Any) -> str:
    client_id, _key = make_client(store)
    tools = persona.pop("tools", None)
    agent = make_agent(store, client_id, scripted_profile(store, script), tools, **persona)
    return make_conversation(store, client_id, agent).id


async def ended(cluster: InProcessCluster, turn_id: str) -> TurnStatus:
    def status() -> TurnStatus | None:
        found = cluster.store.turns.get(turn_id).status
        return None if found is TurnStatus.ACTIVE else found

    return await async_wait_for(status, timeout=20)


def event_types(store: Store, conversation_id: str) -> list[str]:
    events = store.events.list(conversation_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free, always
    return [e.type for e in events]


async def test_a_turn_streams_and_completes(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "hello there"}])
    stream = cluster.stream_events(conv, 0)
    assert (await anext(stream))["type"] == "conversation_started"  # subscribed from here on
    ack = await cluster.post_message(conv, "hi", "user-1")
    seen: list[dict[str, Any]] = []
    async for event in stream:
        seen.append(event)
        if event["type"] == "turn.completed":
            break
    assert "".join(e["delta"] for e in seen if e["type"] == "token") == "hello there"
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert event_types(cluster.store, conv) == [
        "conversation_started",
        "turn.started",
        "message",
        "move",
        "message",
        "turn.completed",
    ]


async def test_a_failing_model_is_retried_then_fails_the_turn(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"fail": "model down"}])
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.FAILED
    turn = cluster.store.turns.get(ack.turn_id)
    assert turn.failure_reason == "model down"
    assert event_types(cluster.store, conv)[-1] == "turn.failed"


async def test_an_async_tool_is_answered_on_the_same_turn(cluster: InProcessCluster) -> None:
    report = task_tool(
        cluster.store,
        "report",
        [{"kind": "python", "params": {"callable": "library.callables:calculate"}}],
        schema={"type": "object", "properties": {"expression": {"type": "string"}}},
        **{"async": True},
    )
    # Rule-style: a follow-up is a fresh model loop, so each call answers by its last message.
    script = [
        {
            "match": "compute",
            "tool_calls": [{"name": "report", "arguments": {"expression": "6*7"}}],
        },
        {"match": "dispatched", "reply": "on it"},
        {"match": "[background result]", "reply": "the result is {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[report])
    ack = await cluster.post_message(conv, "compute", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED
    answers = [m.content for m in cluster.store.messages.list(conv) if m.role is MessageRole.AGENT]
    assert answers[0] == "on it" and "[background result] report" in answers[1]
    # The result may land before "on it" is out (then the turn never waits): either way, once.
    assert event_types(cluster.store, conv).count("operation.delivered") == 1


async def test_a_new_incarnation_fails_a_turn_cut_mid_loop(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "too late", "delay_s": 30}])
    ack = await cluster.post_message(conv, "this must survive", "user-1")
    await asyncio.sleep(0.05)
    cluster.crash(conv)  # constructed on the running loop: it recovers without being called
    assert await ended(cluster, ack.turn_id) is TurnStatus.FAILED
    assert cluster.store.turns.get(ack.turn_id).failure_reason == "interrupted"
    assert cluster.store.messages.get(ack.message_id).content == "this must survive"


async def test_a_completed_operation_is_delivered_by_the_next_incarnation(
    cluster: InProcessCluster,
) -> None:
    slow = task_tool(
        cluster.store,
        "slow",
        [{"kind": "python", "params": {"callable": "library.callables:sleep"}}],
        **{"async": True},
    )
    script = [
        {"match": "go", "tool_calls": [{"name": "slow", "arguments": {"seconds": 0.3}}]},
        {"match": "dispatched", "reply": "started"},
        {"match": "[background result]", "reply": "done: {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[slow])
    ack = await cluster.post_message(conv, "go", "user-1")

    def awaiting() -> bool:
        return cluster.store.turns.get(ack.turn_id).awaiting_operations

    await async_wait_for(awaiting, timeout=10)
    cluster.crash(conv)  # the result lands while the conversation restarts
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED
    assert event_types(cluster.store, conv).count("operation.delivered") == 1


async def test_cancel_closes_the_open_tool_call(cluster: InProcessCluster) -> None:
    slow = task_tool(
        cluster.store,
        "wait",
        [{"kind": "python", "params": {"callable": "library.callables:sleep"}}],
    )
    script = [{"tool_calls": [{"name": "wait", "arguments": {"seconds": 30}}]}]
    conv = conversation(cluster.store, script, tools=[slow])
    ack = await cluster.post_message(conv, "go", "user-1")
    await async_wait_for(lambda: "acting" in str(cluster.actors[conv].state.turns), timeout=10)
    outcome = await cluster.cancel_turn(conv, ack.turn_id, "stop")
    assert outcome.status is TurnStatus.FAILED and outcome.failure_reason == "stop"
    [move] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None and move.tool_result.error is not None
    assert move.tool_result.error.message == "the turn was cancelled: stop"


async def test_the_queue_policy_runs_turns_one_after_the_other(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}", "delay_s": 0.2}])
    await cluster.set_policy(conv, ConcurrencyPolicy.QUEUE)
    first = await cluster.post_message(conv, "one", "user-1")
    second = await cluster.post_message(conv, "two", "user-1")
    assert not first.queued and second.queued
    assert await ended(cluster, second.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.turns.get(first.turn_id).completed_at <= (  # type: ignore[operator]
        cluster.store.turns.get(second.turn_id).started_at
    )


async def test_a_failing_hook_fails_the_turn_and_says_so(cluster: InProcessCluster) -> None:
    broken = task_tool(
        cluster.store, "broken", [{"kind": "python", "params": {"callable": "library.nope:x"}}]
    )
    conv = conversation(
        cluster.store, [{"reply": "never"}], context_assembly_task_id=broken.target_id
    )
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.FAILED
    turn = cluster.store.turns.get(ack.turn_id)
    assert turn.issues.context_assembly_failed
    assert turn.failure_reason is not None and turn.failure_reason.startswith("context assembly")
    assert "context_assembly.failed" in event_types(cluster.store, conv)


async def test_a_failing_extraction_keeps_the_answer(cluster: InProcessCluster) -> None:
    broken = task_tool(
        cluster.store, "broken", [{"kind": "python", "params": {"callable": "library.nope:x"}}]
    )
    conv = conversation(
        cluster.store, [{"reply": "kept"}], memory_extraction_task_id=broken.target_id
    )
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.turns.get(ack.turn_id).issues.memory_extraction_failed
    assert cluster.store.messages.list(conv)[-1].content == "kept"
    assert "memory_extraction.failed" in event_types(cluster.store, conv)
