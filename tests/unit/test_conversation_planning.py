"""The Conversation's state machine as tables: (state, event) → decisions. No Ray, no store.

Every event is planned against a turn in every phase (and against no live turn); the message
policy, recovery and conversation changes have tables of their own; a few traces drive whole turns
through ``plan`` + ``apply``. The pure helpers (tool-call validation, context) are tested too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from actors.conversation import context as ctx
from actors.conversation import folding, planning
from actors.conversation.context import tool_spec
from actors.conversation.domain import (
    AgentSetup,
    AppendAgentMessage,
    ApprovalDecided,
    ApprovalRequest,
    ApprovalTimedOut,
    ApprovalVerdict,
    ApprovalWait,
    AssembleContext,
    AwaitOperations,
    BeginTurn,
    CallModel,
    CancelRequested,
    CloseDangling,
    CompleteTurn,
    CompletionRequested,
    ContextAssembled,
    ContextAssemblyFailed,
    ConversationEvent,
    ConversationState,
    Decision,
    DispatchTool,
    ExtractMemories,
    FailTurn,
    HoldDelivery,
    MarkConversation,
    MemoriesExtracted,
    MemoryExtractionFailed,
    MessageReceived,
    ModelAnswered,
    ModelFailed,
    NoteEvent,
    OperationCompleted,
    OperationsChecked,
    ParticipantAdded,
    ParticipantRemoved,
    PolicySet,
    QueueTurn,
    Recovered,
    RecoveredTurn,
    Refuse,
    ReturnToolError,
    RunTools,
    SaveConversation,
    SettleExtraction,
    SettleOperation,
    StartOperation,
    StartTurn,
    StepFailed,
    StopWork,
    ToolCatalog,
    ToolsReturned,
    TurnPhase,
    TurnRequested,
    TurnState,
)
from actors.conversation.resumption import MAX_INTERRUPTIONS
from actors.conversation.standing import conversation_status
from actors.conversation.tool_calls import build_catalog, plan_tool_call
from core.domain import (
    Agent,
    AgentCaller,
    AsyncOperation,
    ConcurrencyPolicy,
    Constraints,
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    ModelProfile,
    OperationStatus,
    Participant,
    PendingExtraction,
    Persona,
    Tool,
    ToolError,
    ToolResult,
    Turn,
    Usage,
    UserCaller,
    WorkflowCaller,
)
from core.errors import ErrorCode
from core.llm.protocol import ToolCallRequested

NOW = datetime(2026, 1, 1, tzinfo=UTC)

SEARCH = Tool(
    id="t-search",
    name="search",
    description="search things",
    input_schema={
        "type": "object",
        "properties": {"q": {"type": "string", "maxLength": 20}},
        "required": ["q"],
        "additionalProperties": False,
    },
    target_type="task",
    target_id="task-search",
)
MAPPED = Tool(
    id="t-mapped",
    name="mapped",
    description="mapped input",
    input_schema={"type": "object", "properties": {"topic": {"type": "object"}}},
    target_type="task",
    target_id="task-m",
    input_mapping={"query": "$.topic.name", "mode": "fast"},
)
ASK = Tool(
    id="t-ask",
    name="ask_expert",
    description="ask",
    input_schema={"type": "object"},
    target_type="agent",
    target_id="agent-expert",
)
BACKGROUND = Tool(
    id="t-bg",
    name="report",
    description="a long report",
    input_schema={"type": "object"},
    target_type="task",
    target_id="task-report",
    **{"async": True},
)
CATALOG = build_catalog(
    Persona(
        id="p",
        system_prompt="x",
        constraints=Constraints(deny=["mapped_denied"], allowed_agents=["agent-other"]),
    ),
    [SEARCH, MAPPED, ASK, SEARCH.model_copy(update={"name": "mapped_denied"}), BACKGROUND],
)
PROFILE = ModelProfile(id="m", provider="scripted")


def setup(max_moves: int = 8, extraction: str | None = None) -> AgentSetup:
    persona = Persona(
        id="p",
        system_prompt="be brief",
        memory_extraction_task_id=extraction,
        constraints=Constraints(max_moves_per_turn=max_moves),
    )
    agent = Agent(id="agent-1", client_id="c", name="a", persona=persona, created_at=NOW)
    return AgentSetup(agent, persona, PROFILE, CATALOG)


BASE = ctx.assemble_context(Persona(id="p", system_prompt="be brief"), PROFILE, [], CATALOG, "a")


def call(name: str, arguments: object, n: int = 0) -> ToolCallRequested:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallRequested(id=f"c-{name}-{n}", name=name, arguments=text)


# t1's answer held for a person's approval (the ``approving`` phase): one search call.
WAIT = ApprovalWait(
    1,
    "let me look",
    (call("search", {"q": "x"}),),
    ("op-1",),
    (ApprovalRequest("approval_t1_1_0", "c-search-0", "search", {"q": "x"}, 60, "deny", NOW, NOW),),
)


def conversation(policy: ConcurrencyPolicy = ConcurrencyPolicy.PARALLEL, **kw: Any) -> Conversation:
    fields: dict[str, Any] = {
        "id": "conv",
        "client_id": "c",
        "agent_id": "agent-1",
        "participants": [Participant(type="agent", id="agent-1")],
        "concurrency_policy": policy,
        "created_at": NOW,
        **kw,
    }
    return Conversation(**fields)


def operation(op_id: str, turn_id: str = "t1", **kw: Any) -> AsyncOperation:
    fields: dict[str, Any] = {
        "id": op_id,
        "conversation_id": "conv",
        "turn_id": turn_id,
        "tool_call_id": f"call-{op_id}",
        "tool_id": "t-bg",
        "tool_name": "report",
        "created_at": NOW,
        **kw,
    }
    return AsyncOperation(**fields)


def done(op: AsyncOperation, text: str = "42") -> AsyncOperation:
    result = ToolResult(tool_call_id=op.tool_call_id, success=True, result=text)
    return op.model_copy(update={"status": OperationStatus.COMPLETED, "result": result})


def live(phase: TurnPhase, **kw: Any) -> TurnState:
    """Turn t1 in ``phase``, with what that phase implies (setup and context once assembled)."""
    fields: dict[str, Any] = {"turn_id": "t1", "agent_id": "agent-1", "phase": phase}
    if phase not in (TurnPhase.QUEUED, TurnPhase.AWAITING):
        fields |= {"setup": setup(), "base": BASE}
    if phase in (TurnPhase.ACTING, TurnPhase.APPROVING):
        fields["open_calls"] = (call("search", {"q": "x"}),)
    if phase is TurnPhase.APPROVING:
        fields["approval"] = WAIT
    return TurnState(**{**fields, **kw})


def state_with(
    *turns: TurnState, policy: ConcurrencyPolicy = ConcurrencyPolicy.PARALLEL
) -> ConversationState:
    state = ConversationState(conversation(policy))
    for turn in turns:
        state.turns[turn.turn_id] = turn
        if turn.phase is TurnPhase.QUEUED:
            state.queue.append(turn.turn_id)
    return state


def turns_only(decisions: list[Decision]) -> list[Decision]:
    """The decisions about turns; the conversation's own record (``MarkConversation``) has its
    tables below."""
    return [d for d in decisions if not isinstance(d, MarkConversation)]


def names(decisions: list[Decision]) -> list[str]:
    return [type(d).__name__ for d in turns_only(decisions)]


def received(content: str = "hi", **kw: Any) -> MessageReceived:
    fields: dict[str, Any] = {
        "turn_id": "t-new",
        "message_id": "m-new",
        "content": content,
        "author": "user-1",
        "caller": UserCaller(user_id="user-1"),
        "source": "human",
        "requested_agent_id": None,
        "reply_to_message_id": None,
        "parent_turn_id": None,
        "policy_applies": True,
        "at": NOW,
        **kw,
    }
    return MessageReceived(**fields)


def error(message: str = "boom") -> ToolError:
    return ToolError(code=ErrorCode.EXECUTION_FAILED, message=message, retriable=True)


def active_turn(turn_id: str = "t1", **kw: Any) -> Turn:
    fields: dict[str, Any] = {
        "id": turn_id,
        "conversation_id": "conv",
        "agent_id": "agent-1",
        "caller": UserCaller(user_id="u"),
        "input": "hi",
        "created_at": NOW,
        **kw,
    }
    return Turn(**fields)


# --------------------------------------------------------------------------- every event x phase

PHASES: list[TurnPhase | None] = [None, *TurnPhase]

EVENTS: dict[str, ConversationEvent] = {
    "context assembled": ContextAssembled("t1", setup(), BASE, NOW),
    "context failed": ContextAssemblyFailed("t1", error(), NOW),
    "model answered": ModelAnswered("t1", "done", (), Usage(completion_tokens=3), (), NOW),
    "model called tools": ModelAnswered(
        "t1", "let me look", (call("search", {"q": "x"}),), Usage(), ("op-1",), NOW
    ),
    "model failed": ModelFailed("t1", error("model down"), NOW),
    "tools returned": ToolsReturned(
        "t1", (ToolResult(tool_call_id="c-search-0", success=True, result="ok"),), NOW
    ),
    "memories extracted": MemoriesExtracted("t1", NOW),
    "extraction failed": MemoryExtractionFailed("t1", error(), NOW),
    "operation completed": OperationCompleted(done(operation("op-1")), NOW),
    "operations checked": OperationsChecked("t1", (operation("op-1"),), NOW),
    "cancel requested": CancelRequested("t1", "stop", NOW),
    "step failed": StepFailed("t1", "agent gone", NOW),
    "turn requested": TurnRequested(active_turn("t1"), NOW),
    "approval decided": ApprovalDecided(ApprovalVerdict("approval_t1_1_0", "approve", "u", NOW)),
    "approval timed out": ApprovalTimedOut("approval_t1_1_0", NOW),
}

A = None  # no live turn t1
Q, AS, TH, AC, AP, AW = (
    TurnPhase.QUEUED,
    TurnPhase.ASSEMBLING,
    TurnPhase.THINKING,
    TurnPhase.ACTING,
    TurnPhase.APPROVING,
    TurnPhase.AWAITING,
)
EVERY_PHASE: dict[TurnPhase | None, list[str]] = {phase: [] for phase in PHASES}

EXPECTED: dict[str, dict[TurnPhase | None, list[str]]] = {
    "context assembled": {**EVERY_PHASE, AS: ["AdoptContext", "CallModel"]},
    "context failed": {**EVERY_PHASE, AS: ["NoteEvent", "FailTurn"]},
    # t1 has op-1 pending in every phase: a plain answer leaves the turn waiting for it.
    "model answered": {**EVERY_PHASE, TH: ["AddUsage", "AppendAgentMessage", "AwaitOperations"]},
    "model called tools": {**EVERY_PHASE, TH: ["AddUsage", "RunTools"]},
    "model failed": {**EVERY_PHASE, TH: ["FailTurn"]},
    "tools returned": {**EVERY_PHASE, AC: ["RecordMoves", "CallModel"]},
    # Extraction runs after its turn completed: a live turn has none (table of its own below).
    "memories extracted": EVERY_PHASE,
    "extraction failed": EVERY_PHASE,
    # An operation of t1 (pending on it in every live phase below): delivered now when the turn
    # waits for it, held while the turn is busy; with the turn gone it is settled as cancelled.
    "operation completed": {
        A: ["SettleOperation"],
        Q: ["HoldDelivery"],
        AS: ["HoldDelivery"],
        TH: ["HoldDelivery"],
        AC: ["HoldDelivery"],
        AP: ["HoldDelivery"],
        AW: ["AssembleContext"],
    },
    "operations checked": {
        A: [],
        Q: ["SettleOperation", "HoldDelivery"],
        AS: ["SettleOperation", "HoldDelivery"],
        TH: ["SettleOperation", "HoldDelivery"],
        AC: ["SettleOperation", "HoldDelivery"],
        AP: ["SettleOperation", "HoldDelivery"],
        AW: ["SettleOperation", "AssembleContext"],
    },
    "cancel requested": {
        **{phase: ["StopWork", "CloseDangling", "FailTurn"] for phase in PHASES},
        A: [],
    },
    "step failed": {
        **{phase: ["FailTurn"] for phase in PHASES},
        A: [],
        AC: ["CloseDangling", "FailTurn"],
        AP: ["CloseDangling", "FailTurn"],
    },
    "turn requested": {**EVERY_PHASE, A: ["StartTurn", "AssembleContext"]},
    # A decision on t1's held call: only the approving turn has it (elsewhere: 404).
    "approval decided": {
        **{phase: ["Refuse"] for phase in PHASES},
        AP: ["SettleApproval", "RunTools"],
    },
    "approval timed out": {**EVERY_PHASE, AP: ["SettleApproval", "RunTools"]},
}


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.value if p else "no-turn")
@pytest.mark.parametrize("event_name", list(EVENTS))
def test_every_event_in_every_phase(event_name: str, phase: TurnPhase | None) -> None:
    turns = [] if phase is None else [live(phase, pending_operations=frozenset({"op-1"}))]
    decisions = planning.plan(state_with(*turns), EVENTS[event_name])
    assert names(decisions) == EXPECTED[event_name][phase]


T1_EXTRACTION = PendingExtraction(
    conversation_id="conv", turn_id="t1", agent_id="agent-1", task_id="extract"
)
# Turn t1 completed and its memory extraction runs (the turn is no longer live): the extraction's
# outcomes settle it; every other event plans as with no turn t1.
EXPECTED_WHILE_EXTRACTING: dict[str, list[str]] = {
    **{name: table[A] for name, table in EXPECTED.items()},
    "memories extracted": ["SettleExtraction"],
    "extraction failed": ["NoteEvent", "SettleExtraction"],
    "step failed": ["NoteEvent", "SettleExtraction"],  # the extraction step crashed
}


@pytest.mark.parametrize("event_name", list(EVENTS))
def test_every_event_while_a_completed_turn_extracts(event_name: str) -> None:
    state = state_with()
    state.extracting["t1"] = T1_EXTRACTION
    decisions = planning.plan(state, EVENTS[event_name])
    assert names(decisions) == EXPECTED_WHILE_EXTRACTING[event_name]


def test_the_tables_cover_every_event_type() -> None:
    covered = {type(e) for e in EVENTS.values()}
    conversation_level = {
        MessageReceived,
        Recovered,
        ParticipantAdded,
        ParticipantRemoved,
        PolicySet,
        CompletionRequested,
    }
    every = set(ConversationEvent.__args__)  # type: ignore[attr-defined]
    assert every == covered | conversation_level  # the rest have tables of their own below


# --------------------------------------------------------------------------- a new message


def running(turn_id: str) -> TurnState:
    return live(TurnPhase.THINKING, turn_id=turn_id)


@pytest.mark.parametrize(
    ("policy", "turns", "expected"),
    [
        (ConcurrencyPolicy.PARALLEL, [], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.PARALLEL, [running("t1")], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.QUEUE, [], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.QUEUE, [running("t1")], ["BeginTurn", "QueueTurn"]),
        (ConcurrencyPolicy.QUEUE, [live(TurnPhase.QUEUED)], ["BeginTurn", "QueueTurn"]),
        (ConcurrencyPolicy.QUEUE, [live(TurnPhase.AWAITING)], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.REJECT, [], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.REJECT, [running("t1")], ["Refuse"]),
        (ConcurrencyPolicy.REJECT, [live(TurnPhase.AWAITING)], ["BeginTurn", "AssembleContext"]),
        (ConcurrencyPolicy.INTERRUPT, [], ["BeginTurn", "AssembleContext"]),
        (
            ConcurrencyPolicy.INTERRUPT,
            [running("t1"), running("t2")],
            ["StopWork", "CloseDangling", "FailTurn"] * 2 + ["BeginTurn", "AssembleContext"],
        ),
    ],
)
def test_a_message_mid_turn_follows_the_policy(
    policy: ConcurrencyPolicy, turns: list[TurnState], expected: list[str]
) -> None:
    decisions = planning.plan(state_with(*turns, policy=policy), received())
    assert names(decisions) == expected


def test_calls_from_agents_and_workflows_start_whatever_the_policy() -> None:
    state = state_with(running("t1"), policy=ConcurrencyPolicy.REJECT)
    decisions = planning.plan(state, received(policy_applies=False))
    assert names(decisions) == ["BeginTurn", "AssembleContext"]


def test_interrupted_turns_fail_with_the_reason() -> None:
    state = state_with(running("t1"), policy=ConcurrencyPolicy.INTERRUPT)
    fails = [d for d in planning.plan(state, received()) if isinstance(d, FailTurn)]
    assert [(f.turn_id, f.reason) for f in fails] == [("t1", "interrupted by a new message")]


@pytest.mark.parametrize(
    ("content", "requested", "expected_agent"),
    [
        ("hi", None, "agent-1"),
        ("@helper can you check?", None, "helper"),
        ("mail me at a@helper", None, "agent-1"),  # not a mention
        ("@stranger hi", None, "agent-1"),  # not a participant
        ("hi", "helper", "helper"),
    ],
)
def test_who_answers(content: str, requested: str | None, expected_agent: str) -> None:
    state = ConversationState(
        conversation(
            participants=[
                Participant(type="agent", id="agent-1"),
                Participant(type="agent", id="helper"),
            ]
        )
    )
    begin = planning.plan(state, received(content, requested_agent_id=requested))[0]
    assert isinstance(begin, BeginTurn)
    assert begin.turn.agent_id == expected_agent
    assert begin.message.role is MessageRole.USER and begin.message.content == content


@pytest.mark.parametrize(
    ("conv", "event", "code"),
    [
        (conversation(status=ConversationStatus.COMPLETED), received(), ErrorCode.CONFLICT),
        (conversation(), received(requested_agent_id="nobody"), ErrorCode.INVALID_INPUT),
    ],
)
def test_messages_that_are_refused(
    conv: Conversation, event: MessageReceived, code: ErrorCode
) -> None:
    [refusal] = planning.plan(ConversationState(conv), event)
    assert isinstance(refusal, Refuse) and refusal.code is code


def test_a_queued_turn_starts_when_the_running_one_ends() -> None:
    state = state_with(running("t1"), live(TurnPhase.QUEUED, turn_id="t2"))
    decisions = planning.plan(state, ModelFailed("t1", error(), NOW))
    assert names(decisions) == ["FailTurn", "StartTurn", "AssembleContext"]
    assert decisions[1] == StartTurn("t2", "agent-1", NOW)


def test_a_queued_turn_waits_while_another_still_runs() -> None:
    state = state_with(running("t1"), running("t3"), live(TurnPhase.QUEUED, turn_id="t2"))
    assert names(planning.plan(state, ModelFailed("t1", error(), NOW))) == ["FailTurn"]


# --------------------------------------------------------------------------- recovery


@pytest.mark.parametrize(
    ("recovered", "expected"),
    [
        (RecoveredTurn(active_turn(started_at=None)), ["StartTurn", "AssembleContext"]),
        (
            RecoveredTurn(active_turn(started_at=NOW), (operation("op-1"),)),
            ["NoteEvent", "ResumeTurn", "AssembleContext", "CheckOperations"],
        ),
        (
            RecoveredTurn(
                active_turn(started_at=NOW, awaiting_operations=True), (done(operation("op-1")),)
            ),
            ["WaitForOperations", "AssembleContext"],
        ),
        (
            RecoveredTurn(
                active_turn(started_at=NOW, awaiting_operations=True), (operation("op-1"),)
            ),
            ["WaitForOperations", "CheckOperations"],
        ),
        (
            RecoveredTurn(
                active_turn(started_at=NOW, awaiting_operations=True),
                (done(operation("op-1")), done(operation("op-2")), operation("op-3")),
            ),
            ["WaitForOperations", "AssembleContext", "HoldDelivery", "CheckOperations"],
        ),
    ],
    ids=["unstarted", "mid-loop", "answered+completed", "answered+pending", "answered+mixed"],
)
def test_recovery_classifies_what_a_crash_left(
    recovered: RecoveredTurn, expected: list[str]
) -> None:
    decisions = planning.plan(ConversationState(conversation()), Recovered((recovered,), NOW))
    assert names(decisions) == expected


def test_a_turn_interrupted_too_often_fails_and_closes_its_operations() -> None:
    recovered = RecoveredTurn(
        active_turn(started_at=NOW), (operation("op-1"),), resumes=MAX_INTERRUPTIONS
    )
    closed, failed, mark = planning.plan(
        ConversationState(conversation()), Recovered((recovered,), NOW)
    )
    assert mark == MarkConversation(ConversationStatus.FAILED, (USER_U,))
    assert isinstance(closed, CloseDangling) and closed.operations == ("op-1",)
    assert closed.message == "the conversation restarted mid-turn"
    assert isinstance(failed, FailTurn) and failed.reason.startswith("interrupted: ")
    assert f"restarted {MAX_INTERRUPTIONS + 1} times" in failed.reason
    assert failed.error is not None and failed.error.retriable


def test_recovery_keeps_the_queue_policy_for_unstarted_turns() -> None:
    turns = tuple(RecoveredTurn(active_turn(f"t{n}", started_at=None)) for n in (1, 2))
    queued = ConversationState(conversation(ConcurrencyPolicy.QUEUE))
    assert names(planning.plan(queued, Recovered(turns, NOW))) == [
        "StartTurn",
        "AssembleContext",
        "QueueTurn",
    ]
    parallel = ConversationState(conversation())
    assert (
        names(planning.plan(parallel, Recovered(turns, NOW)))
        == [
            "StartTurn",
            "AssembleContext",
        ]
        * 2
    )


def test_a_recovered_queued_turn_keeps_the_agent_it_was_addressed_to() -> None:
    turns = (
        RecoveredTurn(active_turn("t1", started_at=None)),
        RecoveredTurn(active_turn("t2", started_at=None, agent_id="agent-2")),
    )
    state = ConversationState(conversation(ConcurrencyPolicy.QUEUE))
    decisions = planning.plan(state, Recovered(turns, NOW))
    for decision in decisions:
        folding.apply(state, decision)
    assert turns_only(decisions)[-1] == QueueTurn("t2", "agent-2")
    assert state.turns["t2"].agent_id == "agent-2"


# --------------------------------------------------------------------------- picked up


def test_a_turn_acknowledged_elsewhere_starts_when_the_conversation_is_idle() -> None:
    state = ConversationState(conversation(ConcurrencyPolicy.QUEUE))
    event = TurnRequested(active_turn("t2", started_at=None), NOW, policy_applies=True)
    assert names(planning.plan(state, event)) == ["StartTurn", "AssembleContext"]


def test_a_turn_acknowledged_elsewhere_queues_behind_a_running_one() -> None:
    state = state_with(running("t1"), policy=ConcurrencyPolicy.QUEUE)
    event = TurnRequested(active_turn("t2", started_at=None), NOW, policy_applies=True)
    assert turns_only(planning.plan(state, event)) == [QueueTurn("t2", "agent-1")]
    delegated = TurnRequested(active_turn("t3", started_at=None), NOW)  # policy does not apply
    assert names(planning.plan(state, delegated)) == ["StartTurn", "AssembleContext"]


def test_a_turn_already_live_is_not_picked_up_twice() -> None:
    state = state_with(running("t1"))
    event = TurnRequested(active_turn("t1", started_at=NOW), NOW, policy_applies=True)
    assert planning.plan(state, event) == []


def test_lost_operations_are_settled_with_a_retriable_error() -> None:
    state = state_with(live(TurnPhase.AWAITING, pending_operations=frozenset({"op-1"})))
    settle, assemble = planning.plan(state, OperationsChecked("t1", (operation("op-1"),), NOW))
    assert isinstance(settle, SettleOperation)
    assert settle.operation.status is OperationStatus.COMPLETED
    assert settle.operation.result is not None and settle.operation.result.error is not None
    assert settle.operation.result.error.retriable
    assert isinstance(assemble, AssembleContext) and assemble.delivering == settle.operation


# --------------------------------------------------------------------------- the conversation


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ParticipantAdded("helper", NOW), ["SaveConversation"]),
        (ParticipantAdded("agent-1", NOW), []),
        (ParticipantRemoved("helper", NOW), ["Refuse"]),
        (ParticipantRemoved("agent-1", NOW), ["Refuse"]),
        (PolicySet(ConcurrencyPolicy.QUEUE, NOW), ["SaveConversation"]),
        (CompletionRequested(NOW), ["SaveConversation"]),
    ],
)
def test_conversation_changes(event: ConversationEvent, expected: list[str]) -> None:
    assert names(planning.plan(ConversationState(conversation()), event)) == expected


def test_participants_join_and_leave() -> None:
    state = ConversationState(conversation())
    for decision in planning.plan(state, ParticipantAdded("helper", NOW)):
        folding.apply(state, decision)
    assert [p.id for p in state.conversation.participants] == ["agent-1", "helper"]
    [left] = planning.plan(state, ParticipantRemoved("helper", NOW))
    assert isinstance(left, SaveConversation) and left.event == "participant_left"


# --------------------------------------------------------------------------- whole turns


def drive(state: ConversationState, event: ConversationEvent) -> list[Decision]:
    decisions = planning.plan(state, event)
    for decision in decisions:
        folding.apply(state, decision)
    return decisions


def test_a_turn_with_a_tool_call_from_message_to_completion() -> None:
    state = ConversationState(conversation())
    drive(state, received("find x"))
    assert state.turns["t-new"].phase is TurnPhase.ASSEMBLING
    [_, model_call] = drive(state, ContextAssembled("t-new", setup(), BASE, NOW))
    assert isinstance(model_call, CallModel) and model_call.request.tools
    search = call("search", {"q": "x"})
    [_, tools] = turns_only(
        drive(state, ModelAnswered("t-new", "looking", (search,), Usage(), ("o",), NOW))
    )
    assert isinstance(tools, RunTools) and isinstance(tools.plans[0], DispatchTool)
    result = ToolResult(tool_call_id=search.id, success=True, result={"hits": 1})
    record, again = turns_only(drive(state, ToolsReturned("t-new", (result,), NOW)))
    assert record.reasoning == "looking"  # type: ignore[union-attr]
    assert isinstance(again, CallModel) and again.moves_made == 1
    assert again.request.messages[-1] == {
        "role": "tool",
        "tool_call_id": search.id,
        "content": '{"hits": 1}',
    }
    answer = ModelAnswered("t-new", "found", (), Usage(prompt_tokens=5), (), NOW)
    decisions = drive(state, answer)
    assert names(decisions) == ["AddUsage", "AppendAgentMessage", "CompleteTurn"]
    assert decisions[-1] == CompleteTurn("t-new", Usage(prompt_tokens=5), NOW)
    assert state.turns == {}


def test_extraction_runs_after_completion_when_the_persona_has_it() -> None:
    """Seed 001: the turn completes with its answer and extraction runs after; the completion
    records it as pending (one transaction), and its failure is noted on the completed turn."""
    state = state_with(live(TurnPhase.THINKING, setup=setup(extraction="extract")))
    decisions = drive(state, ModelAnswered("t1", "done", (), Usage(), (), NOW))
    assert names(decisions) == ["AddUsage", "AppendAgentMessage", "CompleteTurn", "ExtractMemories"]
    assert turns_only(decisions)[-2:] == [
        CompleteTurn("t1", Usage(), NOW, extraction=T1_EXTRACTION),
        ExtractMemories(T1_EXTRACTION),
    ]
    assert state.turns == {} and state.extracting == {"t1": T1_EXTRACTION}
    failed = drive(state, MemoryExtractionFailed("t1", error(), NOW))
    assert names(failed) == ["NoteEvent", "SettleExtraction"]
    assert turns_only(failed)[-1] == SettleExtraction("t1", True, NOW)
    assert state.extracting == {}
    assert drive(state, MemoriesExtracted("t1", NOW)) == []  # settled already: stale


def test_the_next_queued_turn_starts_while_the_last_one_extracts() -> None:
    thinking = live(TurnPhase.THINKING, setup=setup(extraction="extract"))
    state = state_with(
        thinking, live(TurnPhase.QUEUED, turn_id="t2"), policy=ConcurrencyPolicy.QUEUE
    )
    decisions = drive(state, ModelAnswered("t1", "done", (), Usage(), (), NOW))
    assert names(decisions)[2:] == [
        "CompleteTurn",
        "ExtractMemories",
        "StartTurn",
        "AssembleContext",
    ]


def test_a_restarted_actor_runs_the_extractions_left_pending() -> None:
    second = T1_EXTRACTION.model_copy(update={"turn_id": "t0"})
    state = state_with()
    state.extracting["t0"] = second  # already running here: not started twice
    decisions = planning.plan(state, Recovered((), NOW, (second, T1_EXTRACTION)))
    assert turns_only(decisions) == [ExtractMemories(T1_EXTRACTION)]


@pytest.mark.parametrize(
    ("moves_made", "max_moves", "tools_allowed"),
    [(0, 8, True), (6, 8, True), (7, 8, False), (0, 1, False)],
)
def test_the_move_budget_takes_tools_away(
    moves_made: int, max_moves: int, tools_allowed: bool
) -> None:
    c = call("search", {"q": "x"})
    turn = live(TurnPhase.ACTING, setup=setup(max_moves), moves_made=moves_made, open_calls=(c,))
    result = ToolResult(tool_call_id=c.id, success=True, result={"hits": 1})
    [_, step] = planning.plan(state_with(turn), ToolsReturned("t1", (result,), NOW))
    assert isinstance(step, CallModel)
    assert bool(step.request.tools) is tools_allowed
    last = step.request.messages[-1]
    assert (last["content"] == ctx.MUST_ANSWER_NOTE) is not tools_allowed


def test_a_model_that_calls_tools_after_its_budget_fails_the_turn() -> None:
    turn = live(TurnPhase.THINKING, setup=setup(max_moves=2), moves_made=2)
    answer = ModelAnswered("t1", "", (call("search", {"q": "x"}),), Usage(), ("o",), NOW)
    decisions = planning.plan(state_with(turn), answer)
    assert names(decisions) == ["AddUsage", "FailTurn"]
    assert "kept calling tools after its 2 moves" in decisions[1].reason  # type: ignore[union-attr]


def test_an_async_tool_is_acknowledged_then_answered_on_the_same_turn() -> None:
    state = state_with(live(TurnPhase.THINKING))
    report = call("report", {})
    [_, tools] = turns_only(
        drive(state, ModelAnswered("t1", "", (report,), Usage(), ("op-9",), NOW))
    )
    assert isinstance(tools, RunTools)
    [start] = tools.plans
    assert isinstance(start, StartOperation) and start.operation.id == "op-9"
    assert start.ack.result["status"] == "dispatched"
    assert state.turns["t1"].pending_operations == {"op-9"}
    drive(state, ToolsReturned("t1", (start.ack,), NOW))
    waiting = drive(state, ModelAnswered("t1", "on it", (), Usage(), (), NOW))
    assert names(waiting) == ["AddUsage", "AppendAgentMessage", "AwaitOperations"]
    assert turns_only(waiting)[-1] == AwaitOperations("t1", Usage(), announce=True)
    finished = done(start.operation)
    [assemble] = turns_only(drive(state, OperationCompleted(finished, NOW)))
    assert assemble == AssembleContext("t1", "agent-1", delivering=finished)
    [_, model_call] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert isinstance(model_call, CallModel)
    assert "[background result] report (operation op-9) finished" in str(
        model_call.request.messages[-1]["content"]
    )
    decisions = drive(state, ModelAnswered("t1", "it is 42", (), Usage(), (), NOW))
    assert names(decisions) == ["AddUsage", "AppendAgentMessage", "CompleteTurn"]
    assert isinstance(decisions[1], AppendAgentMessage) and decisions[1].delivers == "op-9"


def test_a_delivery_that_arrives_mid_loop_waits_then_is_answered() -> None:
    state = state_with(live(TurnPhase.THINKING, pending_operations=frozenset({"op-1", "op-2"})))
    first, second = done(operation("op-1")), done(operation("op-2"))
    assert drive(state, OperationCompleted(first, NOW)) == [HoldDelivery("t1", first)]
    assert drive(state, OperationCompleted(first, NOW)) == []  # the same delivery twice
    decisions = drive(state, ModelAnswered("t1", "hm", (), Usage(), (), NOW))
    assert decisions[-1] == AssembleContext("t1", "agent-1", delivering=first)
    assert drive(state, OperationCompleted(second, NOW)) == [HoldDelivery("t1", second)]


def test_cancelling_closes_open_calls_and_pending_operations() -> None:
    open_call = call("search", {"q": "x"})
    turn = live(TurnPhase.ACTING, open_calls=(open_call,), pending_operations=frozenset({"o"}))
    stop, close, fail = planning.plan(state_with(turn), CancelRequested("t1", "stop", NOW))
    assert stop == StopWork("t1")
    assert close == CloseDangling("t1", (open_call,), ("o",), "the turn was cancelled: stop", NOW)
    assert isinstance(fail, FailTurn) and fail.reason == "stop"


def test_stale_outcomes_of_a_cancelled_step_plan_nothing() -> None:
    state = state_with(live(TurnPhase.THINKING))
    drive(state, CancelRequested("t1", "stop", NOW))
    assert planning.plan(state, ModelAnswered("t1", "late", (), Usage(), (), NOW)) == []


def test_context_assembly_failure_is_noted_and_fails_the_turn() -> None:
    note, fail = turns_only(
        planning.plan(
            state_with(live(TurnPhase.ASSEMBLING)), ContextAssemblyFailed("t1", error("x"), NOW)
        )
    )
    assert isinstance(note, NoteEvent) and note.type == "context_assembly.failed"
    assert isinstance(fail, FailTurn) and fail.context_failed
    assert fail.reason == "context assembly failed: x"


# ------------------------------------------------------------------------ the conversation's record
# Its status follows its turns, and a person who speaks joins it (``MarkConversation``, no event).

ACTIVE, WAITING, FAILED = (
    ConversationStatus.ACTIVE,
    ConversationStatus.WAITING,
    ConversationStatus.FAILED,
)
USER_U = Participant(type="user", id="u")
# The status each event leaves, planned against turn t1 in each phase with the status that phase
# implies (acting, approving, awaiting: waiting; otherwise active); absent: unchanged, so no mark.
EXPECTED_STATUS: dict[str, dict[TurnPhase | None, ConversationStatus]] = {
    "context assembled": {},
    "context failed": {AS: FAILED},
    "model answered": {TH: WAITING},  # answered, op-1 still out
    "model called tools": {TH: WAITING},
    "model failed": {TH: FAILED},
    "tools returned": {AC: ACTIVE},
    "memories extracted": {},
    "extraction failed": {},
    "operation completed": {AW: ACTIVE},  # delivered: the model works on it
    "operations checked": {AW: ACTIVE},
    "cancel requested": {AC: ACTIVE, AP: ACTIVE, AW: ACTIVE},  # cancelled is not failed
    "step failed": {phase: FAILED for phase in PHASES if phase is not None},
    "turn requested": {A: ACTIVE},  # and its user joins (below)
    "approval decided": {},  # waiting for a person, then for its tools: waiting throughout
    "approval timed out": {},
}


def consistent(state: ConversationState) -> ConversationState:
    """``state`` with the status its live turns imply (as the actor keeps it)."""
    status = conversation_status(state, None)
    state.conversation = state.conversation.model_copy(update={"status": status})
    return state


def marks(decisions: list[Decision]) -> list[MarkConversation]:
    return [d for d in decisions if isinstance(d, MarkConversation)]


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.value if p else "no-turn")
@pytest.mark.parametrize("event_name", list(EVENTS))
def test_the_status_follows_the_turns(event_name: str, phase: TurnPhase | None) -> None:
    turns = [] if phase is None else [live(phase, pending_operations=frozenset({"op-1"}))]
    state = consistent(state_with(*turns))
    found = marks(planning.plan(state, EVENTS[event_name]))
    expected = EXPECTED_STATUS[event_name].get(phase)
    joined = (USER_U,) if event_name == "turn requested" and phase is None else ()
    if expected is None and not joined:
        assert found == []
    else:
        assert found == [MarkConversation(expected or state.conversation.status, joined)]


@pytest.mark.parametrize(
    ("phases", "event", "expected"),
    [
        # Every live turn waits on work outside the conversation → waiting; one working → active.
        ((TH, AC), ModelFailed("t1", error(), NOW), WAITING),
        ((TH, AW), ModelFailed("t1", error(), NOW), WAITING),
        ((TH, AC), ModelAnswered("t1", "x", (call("s", {}),), Usage(), ("o",), NOW), WAITING),
        ((AS, AW), StepFailed("t1", "gone", NOW), WAITING),
        ((AC, AW), EVENTS["tools returned"], ACTIVE),
        # A turn still live keeps the conversation from failing; the last one to end decides.
        ((TH, TH), ModelFailed("t1", error(), NOW), None),
        ((TH, Q), ModelFailed("t1", error(), NOW), None),  # the queued one starts: active
    ],
)
def test_the_status_counts_every_live_turn(
    phases: tuple[TurnPhase, TurnPhase],
    event: ConversationEvent,
    expected: ConversationStatus | None,
) -> None:
    first, second = phases
    t2 = live(second, turn_id="t2")
    state = consistent(state_with(live(first), t2))
    found = marks(planning.plan(state, event))
    assert found == ([] if expected is None else [MarkConversation(expected)])


def test_a_failed_conversation_takes_the_next_message_and_is_active_again() -> None:
    state = consistent(state_with(live(TurnPhase.THINKING)))
    assert marks(drive(state, ModelFailed("t1", error(), NOW))) == [MarkConversation(FAILED)]
    assert state.conversation.status is FAILED
    decisions = drive(state, received(caller=UserCaller(user_id="u"), author="u"))
    assert names(decisions) == ["BeginTurn", "AssembleContext"]
    assert marks(decisions) == [MarkConversation(ACTIVE, (USER_U,))]
    assert state.conversation.status is ACTIVE and USER_U in state.conversation.participants
    # A completed one stays completed, whatever its turns do.
    done_state = state_with(live(TurnPhase.THINKING))
    done_state.conversation = conversation(status=ConversationStatus.COMPLETED)
    assert marks(planning.plan(done_state, ModelFailed("t1", error(), NOW))) == []


def test_a_sync_tool_round_waits_then_works_again() -> None:
    state = consistent(state_with(live(TurnPhase.THINKING)))
    search = call("search", {"q": "x"})
    tools = drive(state, ModelAnswered("t1", "looking", (search,), Usage(), ("o",), NOW))
    assert marks(tools) == [MarkConversation(WAITING)]
    result = ToolResult(tool_call_id=search.id, success=True, result={"hits": 1})
    assert marks(drive(state, ToolsReturned("t1", (result,), NOW))) == [MarkConversation(ACTIVE)]
    assert marks(drive(state, ModelAnswered("t1", "found", (), Usage(), (), NOW))) == []
    assert state.conversation.status is ACTIVE and state.turns == {}


@pytest.mark.parametrize(
    ("event", "participants", "joined"),
    [
        (received(), [], (Participant(type="user", id="user-1"),)),
        (received(), [Participant(type="user", id="user-1")], ()),  # a member already
        (received(source="webhook"), [], ()),  # a system, not a person
        (received(source="cron"), [], ()),
        (received(caller=AgentCaller(agent_id="a2", turn_id="t0", conversation_id="c0")), [], ()),
        (received(caller=WorkflowCaller(run_id="run-1"), author="run-1"), [], ()),
        (received(requested_agent_id="nobody"), [], None),  # refused: no mark at all
        (TurnRequested(active_turn("t9"), NOW), [], (USER_U,)),  # acknowledged elsewhere
        (
            Recovered(
                tuple(RecoveredTurn(active_turn(f"t{n}", started_at=None)) for n in (1, 2)), NOW
            ),
            [],
            (USER_U,),  # once, however many of its turns come back
        ),
    ],
    ids=[
        "new-user",
        "known-user",
        "webhook",
        "cron",
        "agent",
        "workflow",
        "refused",
        "turn-requested",
        "recovered",
    ],
)
def test_a_person_who_speaks_joins_the_participants(
    event: ConversationEvent,
    participants: list[Participant],
    joined: tuple[Participant, ...] | None,
) -> None:
    agent = Participant(type="agent", id="agent-1")
    state = ConversationState(conversation(participants=[agent, *participants]))
    found = marks(planning.plan(state, event))
    if joined is None or not joined:
        assert found == []
    else:
        assert found == [MarkConversation(ACTIVE, joined)]


# --------------------------------------------------------------------------- tool calls


@pytest.mark.parametrize(
    ("tool_call", "expected_code", "fragment"),
    [
        (call("nope", {}), "NOT_FOUND", "no tool named 'nope'"),
        (call("mapped_denied", {"q": "x"}), "PERMISSION_DENIED", "not allowed"),
        (call("search", "{not json"), "INVALID_INPUT", "not valid JSON"),
        (call("search", {}), "INVALID_INPUT", "'q' is a required property"),
        (call("search", {"q": "x" * 30}), "INVALID_INPUT", "at q"),
        (call("search", {"q": "a", "extra": 1}), "INVALID_INPUT", "Additional properties"),
        (call("ask_expert", {}), "PERMISSION_DENIED", "allowed agents"),
    ],
)
def test_bad_tool_calls_become_error_results(
    tool_call: ToolCallRequested, expected_code: str, fragment: str
) -> None:
    decision = plan_tool_call(tool_call, CATALOG)
    assert isinstance(decision, ReturnToolError)
    assert decision.result.error is not None
    assert decision.result.error.code == expected_code
    assert fragment in decision.result.error.message
    assert decision.result.tool_call_id == tool_call.id


@pytest.mark.parametrize(
    ("tool_call", "expected_input"),
    [
        (call("search", {"q": "cats"}), {"q": "cats"}),
        (call("mapped", {"topic": {"name": "dogs"}}), {"query": "dogs", "mode": "fast"}),
        (call("mapped", {}), {"query": None, "mode": "fast"}),
    ],
)
def test_valid_tool_calls_are_dispatched_with_mapped_input(
    tool_call: ToolCallRequested, expected_input: dict[str, object]
) -> None:
    decision = plan_tool_call(tool_call, CATALOG)
    assert isinstance(decision, DispatchTool)
    assert decision.input == expected_input


def test_an_agent_call_may_choose_its_mode_outside_the_tools_schema() -> None:
    strict = ASK.model_copy(
        update={"input_schema": {"type": "object", "additionalProperties": False}}
    )
    catalog = ToolCatalog(by_name={"ask_expert": strict})
    chosen = plan_tool_call(call("ask_expert", {"mode": "loop_in"}), catalog)
    assert isinstance(chosen, DispatchTool) and chosen.input == {"mode": "loop_in"}
    wrong = plan_tool_call(call("ask_expert", {"mode": "sideways"}), catalog)
    assert isinstance(wrong, ReturnToolError) and wrong.result.error is not None
    assert "mode is one of ['delegate', 'loop_in']" in wrong.result.error.message
    spec = tool_spec(strict)  # the model is told it may choose
    assert spec.parameters["properties"]["mode"]["enum"] == ["delegate", "loop_in"]


def test_permissions_deny_wins_over_allow() -> None:
    catalog = ToolCatalog(by_name={"search": SEARCH}, allow=("search",), deny=("search",))
    assert not catalog.permitted("search")
    assert catalog.visible() == []


# --------------------------------------------------------------------------- the context


def _message(n: int, role: MessageRole, author: str, content: str) -> Message:
    return Message(
        id=f"m{n}",
        conversation_id="c",
        turn_id=f"t{n}",
        role=role,
        author=author,
        content=content,
        created_at=NOW,
    )


def test_context_has_system_prompt_history_and_tool_specs() -> None:
    persona = Persona(id="p", system_prompt="You help.")
    history = [
        _message(1, MessageRole.USER, "u", "hi"),
        _message(2, MessageRole.AGENT, "a", "hello"),
        _message(3, MessageRole.AGENT, "other", "I am another agent"),
        _message(4, MessageRole.USER, "u", "now?"),
    ]
    request = ctx.assemble_context(
        persona, ModelProfile(id="m", max_tokens=9), history, CATALOG, "a", "Memories: x"
    )
    assert request.messages == [
        {"role": "system", "content": "You help.\n\nMemories: x"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "[other] I am another agent"},
        {"role": "user", "content": "now?"},
    ]
    assert {t.name for t in request.tools} == {"search", "mapped", "ask_expert", "report"}
    assert request.max_tokens == 9


def test_a_spent_budget_removes_tools_from_the_request() -> None:
    base = ctx.assemble_context(Persona(id="p", system_prompt="b"), PROFILE, [], CATALOG, "a")
    request = ctx.request_for_step(base, (), tools_allowed=False)
    assert request.tools == []
    assert request.messages[-1]["content"] == ctx.MUST_ANSWER_NOTE


@pytest.mark.parametrize(
    ("turns", "current", "limit", "expected"),
    [
        (["t1", "t2", "t3", "t4"], "t4", 2, ["t2", "t3", "t4"]),
        (["t1", "t2", "t3", "t4"], "t4", 0, ["t4"]),
        (["t1", "t2", "t3", "t4"], "t2", 5, ["t1", "t2"]),
        (["t4"], "t4", 20, ["t4"]),
    ],
)
def test_recent_turns(turns: list[str], current: str, limit: int, expected: list[str]) -> None:
    assert ctx.recent_turn_ids(turns, current, limit) == expected


def test_planning_modules_import_no_io_libraries() -> None:
    code = (
        "import sys; import actors.conversation.planning, actors.conversation.folding,"
        " actors.conversation.domain, actors.conversation.context, actors.conversation.tool_calls;"
        "bad = [m for m in ('ray', 'lancedb', 'sqlalchemy', 'httpx') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
