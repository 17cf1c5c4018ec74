"""Quotas on every turn, and on tasks' memory writes (issue 17), on the session's real Ray.

A turn an agent starts by delegating, or a workflow starts, is refused over its client's or its
user's quota: it ends with ``turn.failed`` (reason ``quota: ...``, code ``QUOTA_EXCEEDED``) and the
caller's tool result says so, retriable with a hint. A turn whose day's tokens run out during a
model call stops before running that call's tools. A task's ``memory.write`` over the client's
``memories`` quota fails its tool call and stores nothing.
"""

from __future__ import annotations

from typing import Any

from cluster.executor_wiring import executor_services
from core.domain import Agent, MessageRole, TurnStatus, WorkflowCaller
from core.errors import ErrorCode
from core.ids import utc_now
from core.quotas import Quota, UserQuota
from core.workflows import ConversationParent, WorkflowRun
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import conversations, post
from tests.integration.test_multi_agent import _expert_setup


async def _ended(cluster: Cluster, turn_id: str) -> Any:
    def over() -> Any:
        turn = cluster.store.turns.get(turn_id)
        return turn if turn.status is not TurnStatus.ACTIVE else None

    return await async_wait_for(over, timeout=60, interval=0.1)


def _boss(cluster: Cluster, client_id: str, ask: Any) -> Agent:
    script = [  # rules: the first whose pattern is in the last message plays
        {"match": "agent", "reply": "result: {{last_tool}}"},  # any result of ask_expert
        {"match": "go", "tool_calls": [{"name": "ask_expert", "arguments": {"input": "help"}}]},
    ]
    return make_agent(cluster.store, client_id, scripted_profile(cluster.store, script), [ask])


async def _delegate(cluster: Cluster, client_id: str, conv_id: str, user: str) -> tuple[Any, Any]:
    """A turn of the boss for ``user``, which delegates once (a new child conversation: a
    fresh actor reads the quotas): its move's tool result and the child's turn, both ended."""
    ack = await post(conv_id, "go", user)
    turn = await _ended(cluster, ack.turn_id)
    assert turn.status is TurnStatus.COMPLETED, turn.failure_reason
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    children = cluster.store.conversations.list(client_id, parent_id=conv_id)
    newest = max(children, key=lambda c: c.id)  # ids sort by creation
    [child_turn] = cluster.store.turns.list(newest.id)
    return move.tool_result, child_turn


async def test_delegated_and_workflow_turns_over_quota_fail_with_reason_quota(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    client_id, _expert, ask = await _expert_setup(ray_cluster, "delegate")
    boss = _boss(ray_cluster, client_id, ask)
    conv = make_conversation(store, client_id, boss)

    # One turn at a time for the client: the boss's own turn holds it, its delegation is refused.
    store.quotas.put(client_id, Quota(concurrent_turns=1), utc_now())
    result, child = await _delegate(ray_cluster, client_id, conv.id, "alice")
    assert result.success is False and result.error.code is ErrorCode.QUOTA_EXCEEDED
    assert result.error.retriable and result.error.message.endswith("retry in 1s")
    assert "quota concurrent_turns reached: 1 active turns (limit 1)" in result.error.message
    assert child.status is TurnStatus.FAILED and child.failure_code is ErrorCode.QUOTA_EXCEEDED
    assert child.failure_reason.startswith("quota: ") and child.user_id == "alice"
    [failed] = [e for e in store.events.list(child.conversation_id) if e.type == "turn.failed"]
    assert failed.payload["reason"] == child.failure_reason
    assert failed.payload["error"]["code"] == "QUOTA_EXCEEDED"

    # Per user: the client unlimited, alice one turn at a time. Bob's delegation runs (and works
    # for bob); alice's is refused by her own quota.
    store.quotas.put(client_id, Quota(), utc_now())
    store.quotas.put_user(client_id, "alice", UserQuota(concurrent_turns=1), utc_now())
    result, child = await _delegate(ray_cluster, client_id, conv.id, "bob")
    assert result.success, result
    assert child.status is TurnStatus.COMPLETED and child.user_id == "bob"
    result, child = await _delegate(ray_cluster, client_id, conv.id, "alice")
    assert result.error.code is ErrorCode.QUOTA_EXCEEDED
    assert "user alice: quota concurrent_turns reached" in result.error.message
    assert child.user_id == "alice"

    # A workflow's agent turn works for the user whose turn started the run: alice has spent her
    # day's tokens, so the workflow's call (what an agent node does) is refused. (A conversation
    # whose actor has not cached the quotas before this change.)
    store.quotas.put_user(client_id, "alice", UserQuota(tokens_per_day=1), utc_now())
    run = WorkflowRun(
        id=f"run-{conv.id}",
        workflow_id="w",
        workflow_version=1,
        client_id=client_id,
        parent=ConversationParent(conversation_id=conv.id, turn_id=child.id),
        created_at=utc_now(),
    )
    store.workflow_runs.insert(run)
    called = make_conversation(store, client_id, boss)
    answer = await conversations().start_agent_call(
        called.id, "go", WorkflowCaller(run_id=run.id), "delegate"
    )
    assert answer.status is TurnStatus.FAILED and answer.over_quota
    assert answer.failure_reason is not None
    assert answer.failure_reason.startswith("quota: user alice: quota tokens_per_day reached")
    assert store.turns.get(answer.turn_id).user_id == "alice"


async def test_the_days_tokens_running_out_mid_turn_stop_the_turn(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _expert, ask = await _expert_setup(ray_cluster, "delegate")
    store.quotas.put(client_id, Quota(tokens_per_day=1), utc_now())
    conv = make_conversation(store, client_id, _boss(ray_cluster, client_id, ask))
    ack = await post(conv.id, "go", "carol")  # the gateway would admit it: no token spent yet
    turn = await _ended(ray_cluster, ack.turn_id)
    assert turn.status is TurnStatus.FAILED and turn.failure_code is ErrorCode.QUOTA_EXCEEDED
    assert turn.failure_reason is not None
    assert "quota tokens_per_day reached during the turn" in turn.failure_reason
    assert turn.usage.prompt_tokens >= 1  # the call that spent them is counted
    assert store.moves.list(ack.turn_id) == []  # its tool call never ran
    assert store.conversations.list(client_id, parent_id=conv.id) == []


async def test_a_tasks_memory_write_over_quota_fails_and_stores_nothing(
    ray_cluster: Cluster, embedder_app: str
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    remember = task_tool(
        store,
        "remember",
        [{"kind": "memory.write", "params": {"memories": "{{input.memories}}"}}],
        schema={"type": "object", "properties": {"memories": {"type": "array"}}},
    )
    one = {"memories": [{"content": "The user likes tea"}]}
    two = {"memories": [{"content": "The user likes jazz"}, {"content": "The user is in Oslo"}]}
    script = [
        {"match": "one", "tool_calls": [{"name": "remember", "arguments": one}]},
        {"match": "two", "tool_calls": [{"name": "remember", "arguments": two}]},
        {"match": "written", "reply": "{{last_tool}}"},  # both tool results say "written"
    ]
    agent = make_agent(store, client_id, scripted_profile(store, script), [remember])
    conv = make_conversation(store, client_id, agent)
    store.quotas.put(client_id, Quota(memories=2), utc_now())

    first = await post(conv.id, "remember one", "u")
    assert (await _ended(ray_cluster, first.turn_id)).status is TurnStatus.COMPLETED
    [written, _] = store.moves.list(first.turn_id)
    assert written.tool_result is not None and written.tool_result.success

    # 1 stored + 2 more would pass 2: the whole batch is refused, the model hears why.
    second = await post(conv.id, "remember two", "u")
    assert (await _ended(ray_cluster, second.turn_id)).status is TurnStatus.COMPLETED
    [refused, _] = store.moves.list(second.turn_id)
    error = refused.tool_result.error if refused.tool_result else None
    assert error is not None and error.code is ErrorCode.QUOTA_EXCEEDED and not error.retriable
    assert error.message.startswith("memory.write refused, nothing was written: quota memories")
    answers = [m for m in store.messages.list(conv.id) if m.role is MessageRole.AGENT]
    assert "QUOTA_EXCEEDED" in answers[-1].content

    service = await executor_services(ray_cluster.env).memory.service()
    stored = await service.recent(agent.id)
    assert [m.content for m in stored] == ["The user likes tea"]
