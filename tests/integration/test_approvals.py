"""A tool call waiting for approval survives its actor (on a real local Ray): kill -9 of the
conversation actor's process while the turn waits, then the decision arrives through the
conversations port (as the gateway sends it), the restarted actor rebuilds the wait from the log,
runs the approved call once, and the turn completes.

The rules are tested in tests/unit/test_conversation_planning.py (tables) and
tests/unit/test_conversation_approvals.py (the shell in one process).
"""

from __future__ import annotations

import os
import signal

import pytest

from core.approvals import EVENT_TYPES, ApprovalLog
from core.domain import ApprovalPolicy, MessageRole, TurnStatus
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import conversations, post

pytestmark = pytest.mark.timeout(180)

SCRIPT = [
    {"match": "go", "tool_calls": [{"name": "send", "arguments": {"text": "hello"}}]},
    {"match": "text", "reply": "sent: {{last_tool}}"},
]


async def test_kill_9_while_waiting_then_approve_completes_the_turn(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    echo = [{"kind": "python", "params": {"callable": "library.callables:echo"}}]
    tool = task_tool(store, "send", echo, approval=ApprovalPolicy(timeout_s=600))
    agent = make_agent(store, client_id, scripted_profile(store, SCRIPT), [tool])
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "go", "u")

    def waiting() -> str | None:
        log = ApprovalLog(store.events.list_of_types(conv.id, EVENT_TYPES))
        pending = log.pending(frozenset({ack.turn_id}))
        return pending[0].approval_id if pending else None

    approval_id = await async_wait_for(waiting, timeout=60, interval=0.2)
    assert store.turns.get(ack.turn_id).awaiting_approval
    before = await conversations().status(conv.id)
    assert before["live_turns"] == {ack.turn_id: "approving"}
    os.kill(before["pid"], signal.SIGKILL)

    outcome = await conversations().decide_approval(conv.id, approval_id, "approve", "u")
    assert outcome.turn_id == ack.turn_id and outcome.arguments == {"text": "hello"}
    after = await conversations().status(conv.id)
    assert after["pid"] != before["pid"]  # a new incarnation took the decision

    def ended() -> TurnStatus | None:
        found = store.turns.get(ack.turn_id).status
        return None if found is TurnStatus.ACTIVE else found

    assert await async_wait_for(ended, timeout=60, interval=0.2) is TurnStatus.COMPLETED
    answers = [m.content for m in store.messages.list(conv.id) if m.role is MessageRole.AGENT]
    assert answers == ['sent: {"text": "hello"}']
    [move, _answer] = store.moves.list(ack.turn_id)
    assert move.tool_result is not None and move.tool_result.success
    types = [e.type for e in store.events.list(conv.id)]
    assert types.count("approval.requested") == 1 and types.count("approval.decided") == 1
    assert types.count("turn.resumed") == 1
