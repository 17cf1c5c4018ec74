"""Tool calls that wait for a person's approval, through the Conversation actor's shell in one
process (real store, real executor, scripted model; no Ray): approve, edit, deny, a timeout, a
restart while waiting, and the refusals (bad edit, decided twice, unknown)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.conversation import steps
from core.approvals import EVENT_TYPES, ApprovalLog
from core.domain import ApprovalPolicy, Constraints, MessageRole, Tool, TurnStatus
from core.errors import Conflict, InvalidInput, NotFound
from core.retry import RetryPolicy
from core.store import Store
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster

pytestmark = pytest.mark.timeout(60)

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 40}},
    "required": ["text"],
    "additionalProperties": False,
}
SCRIPT = [
    {"match": "go", "tool_calls": [{"name": "send", "arguments": {"text": "hello"}}]},
    {"match": "denied", "reply": "not sent: {{last_tool}}"},
    {"match": "did not run", "reply": "not sent: {{last_tool}}"},
    {"match": "text", "reply": "sent: {{last_tool}}"},
]


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessCluster]:
    monkeypatch.setattr(steps, "LLM_CALL", RetryPolicy(3, (0.01, 0.01), 5.0))
    monkeypatch.setattr(steps, "CONTEXT_ASSEMBLY", RetryPolicy(3, (0.01, 0.01), 5.0))
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})
    yield cluster
    cluster.close()


def send_tool(store: Store, **fields: Any) -> Tool:
    echo = [{"kind": "python", "params": {"callable": "library.callables:echo"}}]
    return task_tool(store, "send", echo, SCHEMA, **fields)


def conversation(store: Store, tool: Tool, constraints: Constraints | None = None) -> str:
    client_id, _key = make_client(store)
    profile = scripted_profile(store, SCRIPT)
    agent = make_agent(store, client_id, profile, [tool], constraints=constraints)
    return make_conversation(store, client_id, agent).id


def approvals(store: Store, conversation_id: str) -> ApprovalLog:
    return ApprovalLog(store.events.list_of_types(conversation_id, EVENT_TYPES))


async def waiting(cluster: InProcessCluster, conv: str, turn_id: str) -> str:
    """The approval the turn waits for, once it waits (visible on the turn)."""
    await async_wait_for(lambda: cluster.store.turns.get(turn_id).awaiting_approval, timeout=10)
    [pending] = approvals(cluster.store, conv).pending(frozenset({turn_id}))
    return pending.approval_id


async def ended(cluster: InProcessCluster, turn_id: str) -> TurnStatus:
    def status() -> TurnStatus | None:
        found = cluster.store.turns.get(turn_id).status
        return None if found is TurnStatus.ACTIVE else found

    return await async_wait_for(status, timeout=20)


def answer(store: Store, conv: str) -> str:
    return [m.content for m in store.messages.list(conv) if m.role is MessageRole.AGENT][-1]


async def test_an_approved_call_runs_with_its_arguments(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, send_tool(cluster.store, approval=ApprovalPolicy()))
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    status = await cluster.actor(conv).status()
    assert status["live_turns"] == {ack.turn_id: "approving"}
    assert cluster.store.moves.list(ack.turn_id) == []  # nothing ran yet
    assert cluster.store.conversations.get(conv).status.value == "waiting"
    outcome = await cluster.decide_approval(conv, approval_id, "approve", "user-1")
    assert outcome.arguments == {"text": "hello"} and outcome.tool == "send"
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert answer(cluster.store, conv) == 'sent: {"text": "hello"}'
    assert not cluster.store.turns.get(ack.turn_id).awaiting_approval
    decided = approvals(cluster.store, conv).decided[approval_id]
    assert decided.decision == "approve" and decided.decided_by == "user-1"
    with pytest.raises(Conflict):  # a second decision
        await cluster.decide_approval(conv, approval_id, "deny", "user-1")


async def test_an_edited_call_runs_with_the_edited_arguments(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, send_tool(cluster.store, approval=ApprovalPolicy()))
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    with pytest.raises(InvalidInput, match="the edited arguments"):
        await cluster.decide_approval(conv, approval_id, "edit", "u", {"text": "x" * 80})
    with pytest.raises(InvalidInput):
        await cluster.decide_approval(conv, approval_id, "edit", "u", {"other": 1})
    assert cluster.store.turns.get(ack.turn_id).awaiting_approval  # still waiting
    await cluster.decide_approval(conv, approval_id, "edit", "u", {"text": "bye"})
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert answer(cluster.store, conv) == 'sent: {"text": "bye"}'
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_call is not None and move.tool_call.input == {"text": "bye"}


async def test_a_denied_call_does_not_run_and_the_model_hears_why(
    cluster: InProcessCluster,
) -> None:
    policy = Constraints(approvals={"*": ApprovalPolicy()})  # the persona asks it of every tool
    conv = conversation(cluster.store, send_tool(cluster.store), policy)
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    await cluster.decide_approval(conv, approval_id, "deny", "user-1", reason="not today")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    said = answer(cluster.store, conv)
    assert said.startswith("not sent:") and "denied" in said and "not today" in said
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None and not move.tool_result.success


async def test_an_undecided_call_is_denied_at_its_timeout(cluster: InProcessCluster) -> None:
    conv = conversation(
        cluster.store, send_tool(cluster.store, approval=ApprovalPolicy(timeout_s=1))
    )
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    requested = approvals(cluster.store, conv).requested[approval_id]
    assert requested.timeout_s == 1 and requested.on_timeout == "deny"  # stated in the event
    assert (requested.expires_at - requested.requested_at).total_seconds() == 1
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert "did not run" in answer(cluster.store, conv)
    assert approvals(cluster.store, conv).decided[approval_id].decided_by == "timeout"


async def test_a_timeout_may_approve(cluster: InProcessCluster) -> None:
    policy = ApprovalPolicy(timeout_s=1, on_timeout="approve")
    conv = conversation(cluster.store, send_tool(cluster.store, approval=policy))
    ack = await cluster.post_message(conv, "go", "user-1")
    await waiting(cluster, conv, ack.turn_id)
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert answer(cluster.store, conv) == 'sent: {"text": "hello"}'


async def test_the_wait_survives_a_restart(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, send_tool(cluster.store, approval=ApprovalPolicy()))
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    cluster.crash(conv)  # a new incarnation rebuilds the wait from the log
    outcome = await cluster.decide_approval(conv, approval_id, "approve", "user-1")
    assert outcome.turn_id == ack.turn_id
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert answer(cluster.store, conv) == 'sent: {"text": "hello"}'
    log = approvals(cluster.store, conv)
    assert list(log.requested) == [approval_id]  # asked once, not again after the restart
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None and move.tool_result.success


async def test_a_denial_stays_a_denial_after_a_restart(cluster: InProcessCluster) -> None:
    """Denied, then the actor dies before the calls' results are recorded: the denied call is
    not run by the next incarnation, though its tool is idempotent."""
    tool = send_tool(cluster.store, approval=ApprovalPolicy(), idempotent=True)
    conv = conversation(cluster.store, tool)
    ack = await cluster.post_message(conv, "go", "user-1")
    approval_id = await waiting(cluster, conv, ack.turn_id)
    await cluster.decide_approval(conv, approval_id, "deny", "user-1")
    cluster.crash(conv)
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None and not move.tool_result.success


async def test_an_unknown_approval_is_not_found(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, send_tool(cluster.store, approval=ApprovalPolicy()))
    await cluster.post_message(conv, "hi", "user-1")
    with pytest.raises(NotFound):
        await cluster.decide_approval(conv, "approval_turn_nope_1_0", "approve", "user-1")


async def test_a_cancelled_wait_closes_its_call(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, send_tool(cluster.store, approval=ApprovalPolicy()))
    ack = await cluster.post_message(conv, "go", "user-1")
    await waiting(cluster, conv, ack.turn_id)
    outcome = await cluster.cancel_turn(conv, ack.turn_id, "changed my mind")
    assert outcome.status is TurnStatus.FAILED
    assert not cluster.store.turns.get(ack.turn_id).awaiting_approval
    assert approvals(cluster.store, conv).pending(frozenset({ack.turn_id})) != []  # listed…
    assert approvals(cluster.store, conv).pending(frozenset()) == []  # …only while active
