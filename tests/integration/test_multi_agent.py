"""Async tools, parallel turns, delegation, loop-in and sub-agent sessions on a real local Ray."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from actors.conversation.tool_dispatch import persona_agent_id
from core.domain import (
    ConcurrencyPolicy,
    Constraints,
    MessageRole,
    OperationStatus,
    Tool,
    ToolRetry,
    TurnStatus,
)
from core.ids import utc_now
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import conversations, post

SLOW_RESEARCH = [
    # The task sleeps (a real Ray task that takes a while), then returns its finding.
    {"kind": "python", "params": {"callable": "library.callables:sleep", "seconds": 3}},
    {"kind": "python", "params": {"callable": "library.callables:echo"}},
]


async def _status(cluster: Cluster, turn_id: str, *wanted: TurnStatus, timeout: float = 60) -> None:
    await async_wait_for(
        lambda: cluster.store.turns.get(turn_id).status in wanted, timeout=timeout, interval=0.1
    )


def _agent_messages(cluster: Cluster, conv_id: str) -> list[tuple[str, str]]:
    return [
        (m.turn_id, m.content)
        for m in cluster.store.messages.list(conv_id)
        if m.role is MessageRole.AGENT
    ]


def _async_research_agent(cluster: Cluster, client_id: str) -> Any:
    store = cluster.store
    research = task_tool(
        store,
        "research",
        SLOW_RESEARCH,
        schema={
            "type": "object",
            "properties": {"topic": {"type": "string"}},
            "required": ["topic"],
        },
        is_async=True,
    )

    # Rule-style script: each model call answers according to the last message it sees.
    profile = scripted_profile(
        store,
        [
            {
                "match": "research otters",
                "tool_calls": [{"name": "research", "arguments": {"topic": "otters"}}],
            },
            {"match": "dispatched", "reply": "I started researching; I'll report back."},
            {"match": "beavers", "reply": "Beavers build dams."},
            {"match": "[background result]", "reply": "Research done: {{last_user}}"},
        ],
    )
    return make_agent(store, client_id, profile, [research])


async def test_async_result_arrives_after_another_turn_completed(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = _async_research_agent(ray_cluster, client_id)
    conv = make_conversation(store, client_id, agent)

    first = await post(conv.id, "research otters please", "u")
    # The agent acknowledges at once; the turn stays active while the research runs.
    await async_wait_for(lambda: store.turns.get(first.turn_id).awaiting_operations, 30, 0.05)
    assert store.turns.get(first.turn_id).status is TurnStatus.ACTIVE
    [op] = store.async_operations.list(conv.id, turn_id=first.turn_id)
    assert op.status is OperationStatus.PENDING

    # Meanwhile the user completes another turn.
    second = await post(conv.id, "and what about beavers?", "u")
    await _status(ray_cluster, second.turn_id, TurnStatus.COMPLETED)
    assert store.turns.get(first.turn_id).status is TurnStatus.ACTIVE

    # Then the research completes: a follow-up message on the first turn, which completes.
    await _status(ray_cluster, first.turn_id, TurnStatus.COMPLETED)
    assert store.async_operations.get(op.id).status is OperationStatus.DELIVERED
    messages = store.messages.list(conv.id)
    by_turn = [(m.turn_id, m.role) for m in messages]
    assert by_turn == [
        (first.turn_id, MessageRole.USER),
        (first.turn_id, MessageRole.AGENT),  # the acknowledgement
        (second.turn_id, MessageRole.USER),
        (second.turn_id, MessageRole.AGENT),
        (first.turn_id, MessageRole.AGENT),  # the follow-up, after the other turn
    ]
    assert [m.seq for m in messages] == sorted(m.seq for m in messages)
    follow_up = messages[-1].content
    assert "otters" in follow_up and "operation" in follow_up


async def test_async_completion_after_the_actor_was_killed_is_delivered_once(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = _async_research_agent(ray_cluster, client_id)
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "research otters please", "u")
    await async_wait_for(lambda: store.turns.get(ack.turn_id).awaiting_operations, 30, 0.05)

    status = await conversations().status(conv.id)
    os.kill(status["pid"], signal.SIGKILL)

    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED, TurnStatus.FAILED)
    turn = store.turns.get(ack.turn_id)
    assert turn.status is TurnStatus.COMPLETED, turn.failure_reason
    [op] = store.async_operations.list(conv.id, turn_id=ack.turn_id)
    assert op.status is OperationStatus.DELIVERED
    await asyncio.sleep(1.0)  # give a duplicate delivery the chance to show up
    follow_ups = [c for t, c in _agent_messages(ray_cluster, conv.id) if "Research done" in c]
    assert len(follow_ups) == 1


async def _expert_setup(
    cluster: Cluster, mode: str, client_id: str | None = None
) -> tuple[Any, Any, Any]:
    store = cluster.store
    if client_id is None:
        client_id, _ = make_client(store)
    expert = make_agent(
        store,
        client_id,
        scripted_profile(store, [{"reply": "expert: {{history}}"}]),
        system_prompt="EXPERT PROMPT",
    )
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{expert.id.lower()}",
            name="ask_expert",
            description="ask the expert",
            input_schema={
                "type": "object",
                "properties": {"input": {"type": "string"}, "session_id": {"type": "string"}},
            },
            target_type="agent",
            target_id=expert.id,
            invocation_mode=mode,
        ),
        utc_now(),
    )
    return client_id, expert, ask


async def test_delegate_sees_only_its_input_loop_in_sees_the_history(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _expert, ask = await _expert_setup(ray_cluster, "delegate")
    boss = make_agent(
        store,
        client_id,
        scripted_profile(
            store,
            [
                {"tool_calls": [{"name": "ask_expert", "arguments": {"input": "only this"}}]},
                {"reply": "done"},
            ],
        ),
        [ask],
    )
    conv = make_conversation(store, client_id, boss)
    ack = await post(conv.id, "SECRET PARENT HISTORY", "u")
    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED)
    [child] = store.conversations.list(client_id, parent_id=conv.id)
    child_texts = [m.content for m in store.messages.list(child.id)]
    # The delegate's model saw only its input (its answer is its whole visible history).
    assert child_texts == ["only this", "expert: only this"]

    # loop_in: the expert joins the parent conversation and, addressed, sees its history.
    _, expert2, join = await _expert_setup(ray_cluster, "loop_in", client_id)
    host = make_agent(
        store,
        client_id,
        scripted_profile(
            store,
            [
                {"tool_calls": [{"name": "ask_expert", "arguments": {}}]},
                {"reply": "joined"},
            ],
        ),
        [join],
    )
    joined_conv = make_conversation(store, client_id, host)
    first = await post(joined_conv.id, "SHARED HISTORY LINE", "u")
    await _status(ray_cluster, first.turn_id, TurnStatus.COMPLETED)
    participants = {p.id for p in store.conversations.get(joined_conv.id).participants}
    assert expert2.id in participants
    asked = await post(joined_conv.id, f"@{expert2.id} what do you think?", "u")
    await _status(ray_cluster, asked.turn_id, TurnStatus.COMPLETED)
    turn = store.turns.get(asked.turn_id)
    assert turn.agent_id == expert2.id
    answer = _agent_messages(ray_cluster, joined_conv.id)[-1][1]
    # The looped-in agent's model saw the conversation's history.
    assert answer.startswith("expert:")
    assert "SHARED HISTORY LINE" in answer


async def test_permission_denied_and_depth_limit(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _expert, ask = await _expert_setup(ray_cluster, "delegate")
    boss = make_agent(
        store,
        client_id,
        scripted_profile(
            store,
            [
                {"tool_calls": [{"name": "ask_expert", "arguments": {"input": "hi"}}]},
                {"reply": "result: {{last_tool}}"},
            ],
        ),
        [ask],
        constraints=Constraints(allowed_agents=["someone-else"]),
    )
    conv = make_conversation(store, client_id, boss)
    ack = await post(conv.id, "go", "u")
    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED)
    [move, _final] = store.moves.list(ack.turn_id)
    assert move.tool_result is not None and move.tool_result.error is not None
    assert move.tool_result.error.code == "PERMISSION_DENIED"
    assert "PERMISSION_DENIED" in _agent_messages(ray_cluster, conv.id)[-1][1]
    assert store.conversations.list(client_id, parent_id=conv.id) == []

    # Depth: an agent that delegates to itself stops at the configured limit (3).
    selfish = make_agent(store, client_id, scripted_profile(store))
    again = store.tools.put(
        Tool(
            id=f"tool-self-{selfish.id.lower()}",
            name="ask_myself",
            description="recurse",
            input_schema={"type": "object"},
            target_type="agent",
            target_id=selfish.id,
            # Three delegations deep, each a new conversation actor: on a loaded machine the
            # outermost call outlasts the default 30 s per attempt.
            retry=ToolRetry(timeout_ms=240_000),
        ),
        utc_now(),
    )
    recursive = scripted_profile(
        store,
        [
            {"tool_calls": [{"name": "ask_myself", "arguments": {"input": "deeper"}}]},
            {"reply": "got {{last_tool}}"},
        ],
    )
    persona = store.personas.get(selfish.persona_ref.id)  # type: ignore[union-attr]
    store.personas.put(
        persona.model_copy(update={"model_profile_id": recursive.id, "tool_ids": [again.id]}),
        utc_now(),
    )
    root = make_conversation(store, client_id, selfish)
    ack = await post(root.id, "recurse", "u")
    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED, timeout=120)
    depths = []
    frontier = [root.id]
    while frontier:
        current = frontier.pop()
        for child in store.conversations.list(client_id, parent_id=current):
            depths.append(child.depth)
            frontier.append(child.id)
    assert max(depths) == 3
    deepest = [c for c in store.conversations.list(client_id, ancestry="children") if c.depth == 3]
    turn_id = store.turns.list(deepest[0].id)[0].id
    [denied, _] = store.moves.list(turn_id)
    assert denied.tool_result is not None and denied.tool_result.error is not None
    assert "depth limit" in denied.tool_result.error.message


async def test_resume_a_sub_agent_session(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, expert, ask = await _expert_setup(ray_cluster, "delegate")
    persona = store.personas.get(expert.persona_ref.id)  # type: ignore[union-attr]
    recall = scripted_profile(store, [{"reply": "{{history}}"}])
    store.personas.put(persona.model_copy(update={"model_profile_id": recall.id}), utc_now())
    boss = make_agent(
        store,
        client_id,
        scripted_profile(
            store,
            [
                {
                    "tool_calls": [
                        {
                            "name": "ask_expert",
                            "arguments": {"input": "remember 7", "session_id": "s1"},
                        }
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "ask_expert",
                            "arguments": {"input": "what number?", "session_id": "s1"},
                        }
                    ]
                },
                {"reply": "{{last_tool}}"},
            ],
        ),
        [ask],
    )
    conv = make_conversation(store, client_id, boss)
    ack = await post(conv.id, "go", "u")
    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED)
    [child] = store.conversations.list(client_id, parent_id=conv.id)
    texts = [m.content for m in store.messages.list(child.id) if m.role is MessageRole.USER]
    assert texts == ["remember 7", "what number?"]
    # The resumed call's answer shows the earlier exchange of the same session.
    assert "remember 7" in _agent_messages(ray_cluster, conv.id)[-1][1]


@pytest.mark.parametrize("policy", ["queue", "reject", "interrupt"])
async def test_mid_turn_policies(ray_cluster: Cluster, policy: str) -> None:
    from core.errors import Conflict

    store = ray_cluster.store
    client_id, _ = make_client(store)
    slow = scripted_profile(store, [{"reply": "slow {{last_user}}", "delay_s": 1.5}])
    conv = make_conversation(store, client_id, make_agent(store, client_id, slow))
    await conversations().set_policy(conv.id, policy)
    assert store.conversations.get(conv.id).concurrency_policy is ConcurrencyPolicy(policy)
    first = await post(conv.id, "one", "u")
    if policy == "reject":
        with pytest.raises(Conflict):
            await post(conv.id, "two", "u")
        await _status(ray_cluster, first.turn_id, TurnStatus.COMPLETED)
        assert [m.content for m in store.messages.list(conv.id)] == ["one", "slow one"]
        return
    second = await post(conv.id, "two", "u")
    await _status(ray_cluster, second.turn_id, TurnStatus.COMPLETED)
    first_turn = store.turns.get(first.turn_id)
    if policy == "queue":
        assert second.queued is True
        assert first_turn.status is TurnStatus.COMPLETED
        assert first_turn.completed_at is not None
        assert store.turns.get(second.turn_id).started_at >= first_turn.completed_at  # type: ignore[operator]
    else:
        assert first_turn.status is TurnStatus.FAILED
        assert first_turn.failure_reason == "interrupted by a new message"
        assert [c for _, c in _agent_messages(ray_cluster, conv.id)] == ["slow two"]


async def test_cancel_closes_dangling_tool_calls(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    waiting = task_tool(
        store,
        "wait",
        [{"kind": "python", "params": {"callable": "library.callables:sleep", "seconds": 30}}],
    )
    profile = scripted_profile(store, [{"tool_calls": [{"name": "wait", "arguments": {}}]}])
    conv = make_conversation(store, client_id, make_agent(store, client_id, profile, [waiting]))
    ack = await post(conv.id, "wait for it", "u")

    def tools_started() -> bool:
        return any(e.type == "tools.started" for e in store.events.list(conv.id))

    await async_wait_for(tools_started, timeout=60, interval=0.1)  # the call is open now
    result = await conversations().cancel_turn(conv.id, ack.turn_id)
    assert result.status == "failed"
    [move] = store.moves.list(ack.turn_id)
    assert move.tool_call is not None and move.tool_call.name == "wait"
    assert move.tool_result is not None and not move.tool_result.success
    assert store.turns.get(ack.turn_id).failure_reason == "cancelled"


async def test_a_tool_can_target_a_persona_the_client_gets_its_own_agent(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    teammate = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "design: {{history}}"}])
    )
    persona_id = teammate.persona_ref.id  # type: ignore[union-attr]
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{persona_id}",
            name="ask_architect",
            description="ask the architect",
            input_schema={"type": "object", "properties": {"input": {"type": "string"}}},
            target_type="agent",
            target_id=f"persona:{persona_id}",
        ),
        utc_now(),
    )
    manager = make_agent(
        store,
        client_id,
        scripted_profile(
            store,
            [
                {"tool_calls": [{"name": "ask_architect", "arguments": {"input": "a todo app"}}]},
                {"reply": "team says {{last_tool}}"},
            ],
        ),
        [ask],
        constraints=Constraints(allowed_agents=[f"persona:{persona_id}"]),
    )
    conv = make_conversation(store, client_id, manager)
    ack = await post(conv.id, "build a todo app", "u")
    await _status(ray_cluster, ack.turn_id, TurnStatus.COMPLETED)
    created = store.agents.get(persona_agent_id(persona_id, client_id), client_id)
    assert created.persona_ref is not None and created.persona_ref.id == persona_id
    [child] = store.conversations.list(client_id, parent_id=conv.id)
    assert child.agent_id == created.id
    assert "design: a todo app" in _agent_messages(ray_cluster, conv.id)[-1][1]
