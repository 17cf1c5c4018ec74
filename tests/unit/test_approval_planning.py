"""Tool approvals in the turn loop, as tables: which calls wait (the persona's and the tool's
policies), what each decision makes of the held answer, the refusals, the timeouts, and how a
restarted turn takes up its wait. Pure: ``plan`` + ``apply``, no Ray, no store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from actors.conversation import folding, planning
from actors.conversation.approvals import (
    approval_id,
    approval_policy,
    recorded_waits,
    requested_payload,
)
from actors.conversation.domain import (
    AgentSetup,
    ApprovalDecided,
    ApprovalTimedOut,
    ApprovalVerdict,
    ApprovalWait,
    ContextAssembled,
    ConversationState,
    Decision,
    DispatchTool,
    ModelAnswered,
    Recovered,
    RecoveredTurn,
    Refuse,
    RequestApprovals,
    ReturnToolError,
    RunTools,
    SettleApproval,
    StartedTools,
    TurnPhase,
    TurnState,
)
from actors.conversation.resumption import resumption_of
from actors.conversation.tool_calls import build_catalog
from core.approvals import ApprovalLog
from core.domain import (
    Agent,
    ApprovalPolicy,
    Constraints,
    Conversation,
    Event,
    ModelProfile,
    Participant,
    Persona,
    Tool,
    Turn,
    Usage,
    UserCaller,
)
from core.errors import ErrorCode
from core.llm.protocol import ToolCallRequested
from tests.unit.test_conversation_planning import BASE

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 10}},
    "required": ["text"],
    "additionalProperties": False,
}


def tool(name: str, approval: ApprovalPolicy | None = None) -> Tool:
    return Tool(
        id=f"t-{name}",
        name=name,
        description=name,
        input_schema=SCHEMA,
        target_type="task",
        target_id=f"task-{name}",
        approval=approval,
    )


SEND = tool("send", ApprovalPolicy(timeout_s=60))
LOOK = tool("look")
PROFILE = ModelProfile(id="m", provider="scripted")
FIRST, SECOND = approval_id("op-0"), approval_id("op-1")  # the answer's calls' fresh ids


def setup(rules: dict[str, ApprovalPolicy] | None = None) -> AgentSetup:
    persona = Persona(id="p", system_prompt="s", constraints=Constraints(approvals=rules or {}))
    agent = Agent(id="agent-1", client_id="c", name="a", persona=persona, created_at=NOW)
    return AgentSetup(agent, persona, PROFILE, build_catalog(persona, [SEND, LOOK]))


def call(name: str, text: str = "hi", n: int = 0) -> ToolCallRequested:
    return ToolCallRequested(id=f"c{n}", name=name, arguments=json.dumps({"text": text}))


def state(phase: TurnPhase, rules: dict[str, ApprovalPolicy] | None = None) -> ConversationState:
    conversation = Conversation(
        id="conv",
        client_id="c",
        agent_id="agent-1",
        participants=[Participant(type="agent", id="agent-1")],
        created_at=NOW,
    )
    turn = TurnState("t1", "agent-1", phase, setup(rules))
    return ConversationState(conversation, {"t1": turn})


def answered(*calls: ToolCallRequested) -> ModelAnswered:
    ids = tuple(f"op-{i}" for i in range(len(calls)))
    return ModelAnswered("t1", "on it", calls, Usage(), ids, NOW)


def names(decisions: list[Decision]) -> list[str]:
    return [type(d).__name__ for d in decisions if type(d).__name__ != "MarkConversation"]


def drive(s: ConversationState, event: Any) -> list[Decision]:
    decisions = planning.plan(s, event)
    for decision in decisions:
        folding.apply(s, decision)
    return decisions


# --------------------------------------------------------------------------- who waits

FOR_SEND = ApprovalPolicy(timeout_s=5)
EVERY = ApprovalPolicy(timeout_s=7, on_timeout="approve")


@pytest.mark.parametrize(
    ("rules", "the_tool", "expected"),
    [
        ({}, LOOK, None),  # neither asks
        ({}, SEND, SEND.approval),  # the tool asks
        ({"send": FOR_SEND}, SEND, FOR_SEND),  # the persona's rule wins
        ({"*": EVERY}, LOOK, EVERY),  # every tool
        ({"*": EVERY, "send": FOR_SEND}, SEND, FOR_SEND),  # by name before *
        ({"other": FOR_SEND}, LOOK, None),
    ],
)
def test_which_calls_wait(
    rules: dict[str, ApprovalPolicy], the_tool: Tool, expected: ApprovalPolicy | None
) -> None:
    assert approval_policy(setup(rules), the_tool) == expected


@pytest.mark.parametrize(
    ("calls", "expected", "waiting"),
    [
        ((call("look"),), ["AddUsage", "RunTools"], []),
        ((call("send"),), ["AddUsage", "RequestApprovals"], ["c0"]),
        ((call("look"), call("send", n=1)), ["AddUsage", "RequestApprovals"], ["c1"]),
        # A call refused anyway (its arguments break the schema) waits for nobody.
        ((call("send", "x" * 20),), ["AddUsage", "RunTools"], []),
    ],
)
def test_an_answer_is_held_when_a_call_waits(
    calls: tuple[ToolCallRequested, ...], expected: list[str], waiting: list[str]
) -> None:
    s = state(TurnPhase.THINKING)
    decisions = drive(s, answered(*calls))
    assert names(decisions) == expected
    if waiting:
        held = decisions[-1] if isinstance(decisions[-1], RequestApprovals) else decisions[-2]
        assert isinstance(held, RequestApprovals)
        assert [r.tool_call_id for r in held.wait.requests] == waiting
        request = held.wait.requests[0]
        assert request.expires_at == NOW + timedelta(seconds=60)  # stated, from the policy
        assert s.turns["t1"].phase is TurnPhase.APPROVING
        assert s.turns["t1"].open_calls == calls  # a cancel closes them


# --------------------------------------------------------------------------- decisions


def held(*calls: ToolCallRequested) -> ConversationState:
    s = state(TurnPhase.THINKING)
    drive(s, answered(*calls))
    return s


def verdict(decision: str, arguments: dict[str, Any] | None = None, **kw: Any) -> ApprovalDecided:
    decided = kw.pop("approval_id", FIRST)
    return ApprovalDecided(ApprovalVerdict(decided, decision, "u", NOW, arguments, **kw))


def ran(decisions: list[Decision]) -> RunTools:
    [run] = [d for d in decisions if isinstance(d, RunTools)]
    return run


def test_approved_runs_as_the_model_asked() -> None:
    decisions = drive(held(call("send")), verdict("approve"))
    assert names(decisions) == ["SettleApproval", "RunTools"]
    [plan] = ran(decisions).plans
    assert isinstance(plan, DispatchTool) and plan.input == {"text": "hi"}


def test_edited_runs_with_the_edited_arguments() -> None:
    decisions = drive(held(call("send")), verdict("edit", {"text": "bye"}))
    [plan] = ran(decisions).plans
    assert isinstance(plan, DispatchTool) and plan.input == {"text": "bye"}
    assert json.loads(plan.call.arguments) == {"text": "bye"}  # the model sees what ran


def test_denied_does_not_run_and_says_why() -> None:
    decisions = drive(held(call("send")), verdict("deny", reason="too early"))
    [plan] = ran(decisions).plans
    assert isinstance(plan, ReturnToolError) and plan.result.error is not None
    assert plan.result.error.code is ErrorCode.PERMISSION_DENIED
    assert "denied" in plan.result.error.message and "too early" in plan.result.error.message


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (verdict("edit", {"text": "x" * 20}), ErrorCode.INVALID_INPUT),  # breaks the schema
        (verdict("edit", {"nope": 1}), ErrorCode.INVALID_INPUT),
        (verdict("edit", None), ErrorCode.INVALID_INPUT),
        (verdict("approve", approval_id="approval_nope"), ErrorCode.NOT_FOUND),
    ],
)
def test_refused_decisions_leave_the_wait_as_it_was(
    event: ApprovalDecided, code: ErrorCode
) -> None:
    s = held(call("send"))
    decisions = drive(s, event)
    assert [(d.code if isinstance(d, Refuse) else None) for d in decisions] == [code]
    wait = s.turns["t1"].approval
    assert (
        wait is not None and len(wait.pending) == 1 and s.turns["t1"].phase is TurnPhase.APPROVING
    )


def test_a_second_decision_is_a_conflict_while_another_call_waits() -> None:
    s = state(TurnPhase.THINKING, {"*": ApprovalPolicy()})
    drive(s, answered(call("send"), call("look", n=1)))
    first = drive(s, verdict("approve"))
    assert names(first) == ["SettleApproval"]  # the other call still waits: nothing runs
    again = drive(s, verdict("deny"))
    assert [d.code for d in again if isinstance(d, Refuse)] == [ErrorCode.CONFLICT]
    last = drive(s, verdict("deny", approval_id=SECOND))
    assert names(last) == ["SettleApproval", "RunTools"]
    first_plan, second_plan = ran(last).plans
    assert isinstance(first_plan, DispatchTool) and isinstance(second_plan, ReturnToolError)
    settle = last[0]
    assert isinstance(settle, SettleApproval) and settle.last


@pytest.mark.parametrize(
    ("on_timeout", "kind"), [("deny", ReturnToolError), ("approve", DispatchTool)]
)
def test_a_timeout_decides_as_stated(on_timeout: str, kind: type) -> None:
    policy = ApprovalPolicy.model_validate({"timeout_s": 1, "on_timeout": on_timeout})
    s = state(TurnPhase.THINKING, {"send": policy})
    drive(s, answered(call("send")))
    decisions = drive(s, ApprovalTimedOut(FIRST, NOW + timedelta(seconds=1)))
    settle = decisions[0]
    assert isinstance(settle, SettleApproval) and settle.verdict.decided_by == "timeout"
    [plan] = ran(decisions).plans
    assert isinstance(plan, kind)
    assert drive(s, ApprovalTimedOut(FIRST, NOW)) == []  # late: nothing


# --------------------------------------------------------------------------- after a restart


def recorded(wait: ApprovalWait, decided: list[ApprovalVerdict]) -> ApprovalWait:
    """``wait`` as the log gives it back: its requests, and what was decided."""
    events = [
        Event(
            conversation_id="conv",
            seq=i + 1,
            type="approval.requested",
            payload=requested_payload("t1", wait, r),
            at=NOW,
        )
        for i, r in enumerate(wait.requests)
    ]
    events += [
        Event(
            conversation_id="conv",
            seq=100 + i,
            type="approval.decided",
            payload={
                "turn_id": "t1",
                "approval_id": v.approval_id,
                "decision": v.decision,
                "arguments": v.arguments,
                "reason": v.reason,
                "decided_by": v.decided_by,
                "decided_at": NOW.isoformat(),
            },
            at=NOW,
        )
        for i, v in enumerate(decided)
    ]
    return recorded_waits(ApprovalLog(events))["t1"]


def the_wait() -> ApprovalWait:
    s = held(call("send"))
    wait = s.turns["t1"].approval
    assert wait is not None
    return wait


def turn() -> Turn:
    return Turn(
        id="t1",
        conversation_id="conv",
        agent_id="agent-1",
        caller=UserCaller(user_id="u"),
        input="go",
        created_at=NOW,
        started_at=NOW,
    )


def test_a_restarted_turn_waits_again_without_asking_again() -> None:
    wait = recorded(the_wait(), [])
    resumption = resumption_of(RecoveredTurn(turn(), approval=wait))
    assert resumption.approving == wait and resumption.moves_made == 0
    s = state(TurnPhase.THINKING)
    s.turns.clear()
    drive(s, Recovered((RecoveredTurn(turn(), approval=wait),), NOW))
    decisions = drive(s, ContextAssembled("t1", setup(), BASE, NOW))
    held_again = [d for d in decisions if isinstance(d, RequestApprovals)]
    assert len(held_again) == 1 and not held_again[0].announce  # recorded once, not twice
    assert s.turns["t1"].phase is TurnPhase.APPROVING


def test_a_denial_stays_after_a_restart() -> None:
    denied = ApprovalVerdict(FIRST, "deny", "u", NOW)
    wait = recorded(the_wait(), [denied])
    started = StartedTools(1, "on it", (call("send"),))
    resumption = resumption_of(RecoveredTurn(turn(), started=started, approval=wait))
    assert list(resumption.denied) == ["c0"]


def test_the_policy_is_checked_when_stored() -> None:
    with pytest.raises(ValidationError):
        Constraints(approvals={"bad name!": ApprovalPolicy()})
    with pytest.raises(ValidationError):
        ApprovalPolicy(timeout_s=0)
    with pytest.raises(ValidationError):
        ApprovalPolicy.model_validate({"on_timeout": "maybe"})
    assert Constraints(approvals={"*": ApprovalPolicy()}).approvals["*"].on_timeout == "deny"
