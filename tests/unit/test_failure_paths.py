"""Every failure path of seed 001's agent loop, each with its event (issue 12, item 3).

Real Conversation actors, executor and async-operations runner in one process
(``tests.inprocess``), scripted models. Covered elsewhere: a failing context-assembly hook and a
failing memory extraction (test_conversation_shell.py: ``context_assembly.failed``,
``memory_extraction.failed``), ``AGENT_DECLINED`` from an agent that refuses (same file), crashes
mid-turn (test_conversation_resumption.py, tests/integration/test_durable_turns.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from core.domain import MessageRole, OperationStatus, Tool, TurnStatus
from core.ids import new_id, utc_now
from core.store import Store
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster
from tests.unit import test_conversation_shell as shell
from tests.unit.test_conversation_shell import conversation, ended

cluster = shell.cluster  # the in-process cluster fixture (its fast retry policies included)


def _events(store: Store, conversation_id: str, event_type: str) -> list[dict[str, Any]]:
    return [e.payload for e in store.events.list(conversation_id) if e.type == event_type]


def _answer(store: Store, conversation_id: str) -> str:
    return [m.content for m in store.messages.list(conversation_id) if m.role is MessageRole.AGENT][
        -1
    ]


async def test_the_model_is_retried_with_backoff_then_the_turn_fails(
    cluster: InProcessCluster,
) -> None:
    conv = conversation(cluster.store, [{"fail": "model down"}])
    seen: list[dict[str, Any]] = []

    async def listen() -> None:
        async for event in cluster.stream_events(conv, 0):
            seen.append(event)
            if event["type"] == "turn.failed":
                return

    listener = asyncio.create_task(listen())
    await asyncio.sleep(0)
    ack = await cluster.post_message(conv, "hi", "user-1")
    await asyncio.wait_for(listener, 20)
    retries = [e for e in seen if e["type"] == "llm.retry"]
    assert [e["attempt"] for e in retries] == [1, 2]  # 3 attempts (the test's LLM_CALL policy)
    assert all(e["seq"] is None and e["turn_id"] == ack.turn_id for e in retries)
    [failed] = _events(cluster.store, conv, "turn.failed")
    assert failed["reason"] == "model down"
    assert failed["error"]["retriable"] is True
    assert cluster.store.turns.get(ack.turn_id).status is TurnStatus.FAILED


def _flaky(store: Store, **retry: int) -> Any:
    return task_tool(
        store,
        "flaky",
        [{"kind": "python", "params": {"callable": "tests.callables:fail_times"}}],
        retry={"backoff_ms": 1, **retry},
    )


async def test_a_tool_is_retried_per_its_config_and_succeeds(
    cluster: InProcessCluster, tmp_path: Path
) -> None:
    path = tmp_path / "runs"
    tool = _flaky(cluster.store, max_attempts=3)
    script = [
        {
            "match": "go",
            "tool_calls": [{"name": "flaky", "arguments": {"path": str(path), "times": 2}}],
        },
        {"match": "runs", "reply": "after the tool: {{last_tool}}"},
    ]
    conv = conversation(cluster.store, script, tools=[tool])
    ack = await cluster.post_message(conv, "go", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert len(path.read_text().splitlines()) == 3
    assert _answer(cluster.store, conv) == 'after the tool: {"runs": 3}'
    assert _events(cluster.store, conv, "tool.failed") == []


async def test_a_tool_that_keeps_failing_is_reported_retriable_to_the_model(
    cluster: InProcessCluster, tmp_path: Path
) -> None:
    path = tmp_path / "runs"
    tool = _flaky(cluster.store, max_attempts=2)
    script = [
        {
            "match": "go",
            "tool_calls": [{"name": "flaky", "arguments": {"path": str(path), "times": 5}}],
        },
        {"match": "error", "reply": "the tool failed: {{last_tool}}"},
    ]
    conv = conversation(cluster.store, script, tools=[tool])
    ack = await cluster.post_message(conv, "go", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED  # the model decides
    assert len(path.read_text().splitlines()) == 2  # max_attempts
    [failed] = _events(cluster.store, conv, "tool.failed")
    assert failed["tool"] == "flaky" and failed["error"]["retriable"] is True
    assert "flaky, attempt 2" in _answer(cluster.store, conv)
    assert cluster.store.turns.get(ack.turn_id).issues.tool_failures == 1


async def test_a_tool_over_its_timeout_fails_with_timeout(cluster: InProcessCluster) -> None:
    slow = task_tool(
        cluster.store,
        "slow",
        [{"kind": "python", "params": {"callable": "library.callables:sleep"}}],
        retry={"max_attempts": 1, "timeout_ms": 200},
    )
    script = [
        {"match": "go", "tool_calls": [{"name": "slow", "arguments": {"seconds": 30}}]},
        {"match": "error", "reply": "too slow: {{last_tool}}"},
    ]
    conv = conversation(cluster.store, script, tools=[slow])
    ack = await cluster.post_message(conv, "go", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [failed] = _events(cluster.store, conv, "tool.failed")
    assert failed["error"]["code"] == "TIMEOUT"
    assert "TIMEOUT" in _answer(cluster.store, conv)


async def test_a_failed_async_operation_is_delivered_to_its_turn(
    cluster: InProcessCluster, tmp_path: Path
) -> None:
    path = tmp_path / "runs"
    background = task_tool(
        cluster.store,
        "background",
        [{"kind": "python", "params": {"callable": "tests.callables:fail_times"}}],
        retry={"max_attempts": 1},
        **{"async": True},
    )
    script = [
        {
            "match": "go",
            "tool_calls": [{"name": "background", "arguments": {"path": str(path), "times": 9}}],
        },
        {"match": "dispatched", "reply": "started"},
        {"match": "[background result]", "reply": "it failed: {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[background])
    ack = await cluster.post_message(conv, "go", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED
    assert op.result is not None and not op.result.success
    assert "flaky, attempt 1" in _answer(cluster.store, conv)
    [delivered] = _events(cluster.store, conv, "operation.delivered")
    assert delivered["success"] is False and delivered["error"]["code"] == "EXECUTION_FAILED"


async def test_a_crashed_delegate_is_reported_retriable(cluster: InProcessCluster) -> None:
    store = cluster.store
    client_id, _ = make_client(store)
    expert = make_agent(store, client_id, scripted_profile(store, [{"fail": "expert down"}]))
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{new_id().lower()}",
            name="ask_expert",
            description="ask the expert",
            target_type="agent",
            target_id=expert.id,
        ),
        utc_now(),
    )
    script = [
        {"match": "go", "tool_calls": [{"name": "ask_expert", "arguments": {"question": "?"}}]},
        {"match": "error", "reply": "the expert: {{last_tool}}"},
    ]
    caller = make_agent(store, client_id, scripted_profile(store, script), [ask])
    conv = make_conversation(store, client_id, caller).id
    ack = await cluster.post_message(conv, "go", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [failed] = _events(store, conv, "tool.failed")
    assert failed["error"]["code"] == "EXECUTION_FAILED"
    assert failed["error"]["retriable"] is True
    assert "expert down" in failed["error"]["message"]
