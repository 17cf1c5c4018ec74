"""The Conversation actor on a real local Ray: turns, tools, delegation, parallel turns."""

from __future__ import annotations

import asyncio

from core.domain import MessageRole, TurnStatus
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import conversations


async def _turn_done(cluster: Cluster, turn_id: str, timeout: float = 60.0) -> None:
    def done() -> bool:
        return cluster.store.turns.get(turn_id).status is not TurnStatus.ACTIVE

    await async_wait_for(done, timeout=timeout)


async def test_a_turn_streams_tokens_and_stores_the_answer(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store, [{"reply": "hello there friend"}]))
    conv = make_conversation(store, client_id, agent)

    events: list[dict] = []
    subscribed = asyncio.Event()

    async def listen() -> None:
        async for event in conversations().stream_events(conv.id, 0):
            events.append(event)
            subscribed.set()  # the replay of conversation_started: live events follow
            if event["type"] == "turn.completed":
                return

    listener = asyncio.create_task(listen())
    await asyncio.wait_for(subscribed.wait(), 30)
    ack = await conversations().post_message(conv.id, "hi", "user-1")
    await asyncio.wait_for(listener, 60)

    turn = store.turns.get(ack.turn_id)
    assert turn.status is TurnStatus.COMPLETED
    messages = store.messages.list(conv.id)
    assert [m.role for m in messages] == [MessageRole.USER, MessageRole.AGENT]
    assert messages[1].content == "hello there friend"
    tokens = "".join(e["delta"] for e in events if e["type"] == "token")
    assert tokens == "hello there friend"
    seqs = [e["seq"] for e in events if e["seq"] is not None]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_tool_input_rejected_by_schema_reaches_the_model(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    note = task_tool(
        store,
        "note",
        [{"kind": "context.set", "params": {"key": "{{input.key}}", "value": "{{input.value}}"}}],
        schema={
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
            "required": ["key", "value"],
            "additionalProperties": False,
        },
    )
    profile = scripted_profile(
        store,
        [
            {"tool_calls": [{"name": "note", "arguments": {"key": "answer", "value": "lots"}}]},
            {"tool_calls": [{"name": "note", "arguments": {"key": "answer", "value": 42}}]},
            {"reply": "result {{last_tool}}"},
        ],
    )
    agent = make_agent(store, client_id, profile, [note])
    conv = make_conversation(store, client_id, agent)
    ack = await conversations().post_message(conv.id, "remember the answer", "user-1")
    await _turn_done(ray_cluster, ack.turn_id)

    moves = store.moves.list(ack.turn_id)
    first, second = moves[0].tool_result, moves[1].tool_result
    assert first is not None and not first.success and first.error is not None
    assert first.error.code == "INVALID_INPUT"
    assert "value" in first.error.message and "integer" in first.error.message
    assert second is not None and second.success, second
    answer = store.messages.list(conv.id)[-1]
    assert answer.role is MessageRole.AGENT and "42" in answer.content
    assert store.context.get(conv.id, "answer") == 42
    assert store.turns.get(ack.turn_id).issues.tool_failures == 1


async def test_parallel_turns(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    profile = scripted_profile(store, [{"reply": "slow answer to {{last_user}}", "delay_s": 1.5}])
    agent = make_agent(store, client_id, profile)
    conv = make_conversation(store, client_id, agent)

    first = await conversations().post_message(conv.id, "one", "user-1")
    second = await conversations().post_message(conv.id, "two", "user-1")
    status = await conversations().status(conv.id)
    assert set(status["active_turns"]) == {first.turn_id, second.turn_id}
    await _turn_done(ray_cluster, first.turn_id)
    await _turn_done(ray_cluster, second.turn_id)
    answers = {
        m.turn_id: m.content for m in store.messages.list(conv.id) if m.role is MessageRole.AGENT
    }
    assert answers[first.turn_id] == "slow answer to one"
    assert answers[second.turn_id] == "slow answer to two"


async def test_delegate_runs_the_target_in_a_child_conversation(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    helper = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "helper says {{last_user}}"}])
    )
    from core.domain import Tool
    from core.ids import utc_now

    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{helper.id.lower()}",
            name="ask_helper",
            description="ask the helper",
            input_schema={
                "type": "object",
                "properties": {"input": {"type": "string"}},
                "required": ["input"],
            },
            target_type="agent",
            target_id=helper.id,
        ),
        utc_now(),
    )
    boss_profile = scripted_profile(
        store,
        [
            {"tool_calls": [{"name": "ask_helper", "arguments": {"input": "ping"}}]},
            {"reply": "boss heard: {{last_tool}}"},
        ],
    )
    boss = make_agent(store, client_id, boss_profile, [ask])
    conv = make_conversation(store, client_id, boss)
    ack = await conversations().post_message(conv.id, "please ask", "user-1")
    await _turn_done(ray_cluster, ack.turn_id)

    children = store.conversations.list(client_id, parent_id=conv.id)
    assert len(children) == 1
    child = children[0]
    assert child.agent_id == helper.id and child.depth == 1
    assert child.started_by_message_id == ack.message_id
    child_msgs = store.messages.list(child.id)
    assert [m.content for m in child_msgs] == ["ping", "helper says ping"]
    final = store.messages.list(conv.id)[-1].content
    assert "helper says ping" in final


async def test_status_and_participants_follow_the_turns(ray_cluster: Cluster) -> None:
    """Seed 001's conversation statuses on the real actor: ``waiting`` while its only turn waits
    on a tool, ``active`` again once the model works, ``failed`` when its last turn failed, and
    ``active`` at the next message; users who speak are participants, a webhook is not."""
    store = ray_cluster.store
    client_id, _ = make_client(store)
    pause = task_tool(
        store,
        "pause",
        [{"kind": "python", "params": {"callable": "library.workflows.steps:pause"}}],
    )
    profile = scripted_profile(
        store,
        [
            {"match": "rest", "tool_calls": [{"name": "pause", "arguments": {"seconds": 3}}]},
            {"match": "break", "fail": "the model is down"},
        ],  # rule-style: anything else is answered "ok"
    )
    agent = make_agent(store, client_id, profile, tools=[pause])
    conv = make_conversation(store, client_id, agent)

    def status() -> str:
        return store.conversations.get(conv.id).status.value

    rest = await conversations().post_message(conv.id, "rest a while", "ann")
    await async_wait_for(lambda: status() == "waiting", timeout=30)
    await _turn_done(ray_cluster, rest.turn_id)
    assert store.turns.get(rest.turn_id).status is TurnStatus.COMPLETED
    assert status() == "active"

    broken = await conversations().post_message(conv.id, "break it", "bob")
    await _turn_done(ray_cluster, broken.turn_id)
    assert store.turns.get(broken.turn_id).status is TurnStatus.FAILED
    assert status() == "failed"

    again = await conversations().post_message(conv.id, "hello", "hook:h1", source="webhook")
    assert status() == "active"  # taken in: the conversation works again
    await _turn_done(ray_cluster, again.turn_id)
    assert status() == "active"
    participants = [(p.type, p.id) for p in store.conversations.get(conv.id).participants]
    assert participants == [("agent", agent.id), ("user", "ann"), ("user", "bob")]
    types = {e.type for e in store.events.list(conv.id)}
    assert not types & {"participant_joined", "conversation_updated"}  # no event of their own
