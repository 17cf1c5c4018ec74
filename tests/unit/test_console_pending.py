"""The console's fold of a conversation's events into the work each turn has out (async operations
and delegations: ``static/console/pending.js``), run under Node (Debian's nodejs) as the browser
runs the module the gateway serves. Table-driven: each case is a list of events (as the stream and
``GET …/events`` give them) and what the chat should then show of each item."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from serving.gateway.console import ASSETS

SCRIPT = """
const pending = await import(process.argv[1]);
const cases = JSON.parse(process.argv[2]);
const out = cases.map(({ events, children, turnMessageIds }) => {
  const items = pending.foldAll(events);
  const again = events.reduce(pending.foldPending, pending.emptyPending());
  return {
    items: [...items.values()].map((item) => ({
      key: item.key, kind: item.kind, turn: item.turnId, status: item.status,
      since: item.since, endedAt: item.endedAt, child: item.childConversationId,
      background: item.background,
      describe: pending.describe(item), detail: pending.detail(item),
      matched: children ? pending.matchChild(item, children, turnMessageIds || []) : null,
    })),
    same: JSON.stringify([...again.entries()]) === JSON.stringify([...items.entries()]),
    unchanged: pending.foldPending(items, { type: "token", turn_id: "t1" }) === items,
    turnOne: pending.itemsOfTurn(items, "t1").map((item) => item.key),
  };
});
console.log(JSON.stringify(out));
"""

T0, T1, T2 = "2026-11-28T10:00:00+00:00", "2026-11-28T10:00:05+00:00", "2026-11-28T10:00:09+00:00"


def op_started(op: str, turn: str = "t1", at: str = T0, **extra: Any) -> dict[str, Any]:
    payload = {"operation_id": op, "tool": "report", "tool_call_id": f"call-{op}"}
    return {"type": "operation.started", "turn_id": turn, "at": at, **payload, **extra}


def delegated(op: str, mode: str = "delegate", at: str = T0) -> dict[str, Any]:
    return op_started(op, at=at, tool="ask_expert", agent_id="agent_expert", mode=mode)


def delivered(op: str, at: str = T1, **extra: Any) -> dict[str, Any]:
    return {"type": "operation.delivered", "turn_id": "t1", "operation_id": op, "at": at, **extra}


def call_started(call: str, at: str = T0) -> dict[str, Any]:
    payload = {"tool_call_id": call, "tool": "ask_expert", "agent_id": "agent_expert"}
    return {"type": "agent_call.started", "turn_id": "t1", "at": at, "mode": "delegate", **payload}


def call_completed(call: str, **extra: Any) -> dict[str, Any]:
    payload = {"tool_call_id": call, "tool": "ask_expert", "agent_id": "agent_expert"}
    return {"type": "agent_call.completed", "turn_id": "t1", "at": T1, **payload, **extra}


def run_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            SCRIPT,
            ASSETS["pending.js"].as_uri(),
            json.dumps(cases),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


CHILD_EARLY = {"id": "conv_early", "agent_id": "agent_expert", "created_at": "2026-11-28T09:00:00Z"}
CHILD_OTHER = {"id": "conv_other", "agent_id": "agent_other", "created_at": T1}
CHILD_OF_T1 = {
    "id": "conv_child",
    "agent_id": "agent_expert",
    "created_at": "2026-11-28T10:00:01Z",
    "started_by_message_id": "msg_t1",
}
CHILD_OF_T2 = {**CHILD_OF_T1, "id": "conv_t2", "started_by_message_id": "msg_t2"}

# (events, children) → [(key, kind, status, child, matched child, detail)]
CASES: list[Any] = [
    pytest.param(
        [op_started("op1")],
        None,
        [("op:op1", "operation", "pending", None, None, "")],
        id="an operation started is pending",
    ),
    pytest.param(
        [op_started("op1"), delivered("op1", success=True)],
        None,
        [("op:op1", "operation", "done", None, None, "")],
        id="delivered with success: done",
    ),
    pytest.param(
        [op_started("op1"), delivered("op1")],
        None,
        [("op:op1", "operation", "done", None, None, "")],
        id="delivered, how it ended unsaid: done",
    ),
    pytest.param(
        [
            op_started("op1"),
            delivered("op1", success=False, error={"code": "TIMEOUT", "message": "too slow"}),
        ],
        None,
        [("op:op1", "operation", "failed", None, None, "TIMEOUT: too slow")],
        id="delivered with a failure: failed, with the error",
    ),
    pytest.param(
        [
            op_started("op1"),
            {
                "type": "operation.delivery_failed",
                "turn_id": "t1",
                "operation_id": "op1",
                "error": "actor gone",
            },
        ],
        None,
        [
            (
                "op:op1",
                "operation",
                "pending",
                None,
                None,
                "its result has not reached the conversation yet: actor gone",
            )
        ],
        id="a delivery that failed: still pending, said so",
    ),
    pytest.param(
        [delegated("op2"), delivered("op2", success=True, child_conversation_id="conv_child")],
        None,
        [("op:op2", "delegation", "done", "conv_child", None, "")],
        id="an async delegation ends with its child conversation",
    ),
    pytest.param(
        [delegated("op2")],
        [CHILD_EARLY, CHILD_OTHER, CHILD_OF_T2, CHILD_OF_T1],
        [("op:op2", "delegation", "pending", None, "conv_child", "")],
        id="a pending delegation finds its child: its agent, its turn, after it started",
    ),
    pytest.param(
        [delegated("op2", mode="loop_in")],
        [CHILD_OF_T1],
        [("op:op2", "delegation", "pending", None, None, "")],
        id="a loop-in has no child conversation",
    ),
    pytest.param(
        [call_started("c1"), call_completed("c1", success=True, child_conversation_id="conv_c")],
        None,
        [("call:c1", "delegation", "done", "conv_c", None, "")],
        id="a delegation (agent_call) completes with its child",
    ),
    pytest.param(
        [
            call_started("c1"),
            call_completed(
                "c1", success=False, error={"code": "AGENT_DECLINED", "message": "not mine"}
            ),
        ],
        None,
        [("call:c1", "delegation", "failed", None, None, "AGENT_DECLINED: not mine")],
        id="a declined delegation: failed",
    ),
    pytest.param(
        [call_completed("c9", success=True)],
        None,
        [],
        id="a completion without its start (before the events loaded) shows nothing",
    ),
    pytest.param(
        [
            op_started("op1"),
            {
                "type": "move",
                "turn_id": "t1",
                "at": T2,
                "move": {
                    "turn_id": "t1",
                    "raw": {"closed": True},
                    "tool_call": {"id": "call-op1", "name": "report"},
                    "tool_result": {
                        "success": False,
                        "error": {"code": "EXECUTION_FAILED", "message": "cancelled"},
                    },
                },
            },
        ],
        None,
        [
            (
                "op:op1",
                "operation",
                "cancelled",
                None,
                None,
                "EXECUTION_FAILED: cancelled",
            )
        ],
        id="a call closed by a cancelled turn: cancelled",
    ),
    pytest.param(
        [op_started("op1"), {"type": "turn.failed", "turn_id": "t1", "at": T2, "reason": "boom"}],
        None,
        [("op:op1", "operation", "cancelled", None, None, "the turn failed: boom")],
        id="its turn failed: cancelled",
    ),
    pytest.param(
        [
            op_started("op1"),
            op_started("op3", turn="t2"),
            {"type": "turn.completed", "turn_id": "t1", "at": T2},
        ],
        None,
        [
            ("op:op1", "operation", "done", None, None, ""),
            ("op:op3", "operation", "pending", None, None, ""),
        ],
        id="its turn completed: done; another turn's stays pending",
    ),
    pytest.param(
        [op_started("op1"), op_started("op1")],
        None,
        [("op:op1", "operation", "pending", None, None, "")],
        id="a replayed start counts once",
    ),
]


@pytest.mark.parametrize(("events", "children", "expected"), CASES)
def test_events_fold_into_each_turns_pending_work(
    events: list[dict[str, Any]], children: list[dict[str, Any]] | None, expected: list[Any]
) -> None:
    [result] = run_cases([{"events": events, "children": children, "turnMessageIds": ["msg_t1"]}])
    got = [
        (i["key"], i["kind"], i["status"], i["child"], i["matched"], i["detail"])
        for i in result["items"]
    ]
    assert got == expected
    assert result["same"] and result["unchanged"]  # pure: the same fold, nothing else changes


def test_an_item_says_what_it_is_since_when_and_when_it_ended() -> None:
    events = [
        op_started("op1"),
        delegated("op2", at=T1),
        delegated("op4", mode="loop_in"),
        call_started("c1"),
        delivered("op1", success=True, at=T2),
        op_started("op5", turn="t2"),
    ]
    [result] = run_cases([{"events": events}])
    by = {i["key"]: i for i in result["items"]}
    assert by["op:op1"]["describe"] == "report, ran in the background"  # it ended
    assert by["op:op5"]["describe"] == "report, running in the background"
    assert (by["op:op1"]["since"], by["op:op1"]["endedAt"]) == (T0, T2)
    assert by["op:op2"]["describe"] == (
        "ask_expert: a delegation to agent_expert (in the background)"
    )
    assert by["op:op2"]["since"] == T1 and by["op:op2"]["endedAt"] is None
    assert by["op:op4"]["describe"] == (
        "ask_expert: agent_expert looped into this conversation (in the background)"
    )
    assert by["call:c1"]["describe"] == "ask_expert: a delegation to agent_expert"
    assert by["call:c1"]["background"] is False
    assert result["turnOne"] == ["op:op1", "op:op2", "op:op4", "call:c1"]  # t2's left out
