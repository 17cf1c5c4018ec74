"""A turn cut mid-loop by a crash, resumed by the next incarnation (pure planning, no Ray).

Integration: tests/integration/test_durable_turns.py kills the actor process for real.
"""

from __future__ import annotations

from typing import Any

from actors.conversation.domain import (
    AgentSetup,
    CallModel,
    CheckOperations,
    CompleteTurn,
    ContextAssembled,
    ConversationEvent,
    ConversationState,
    Decision,
    DispatchTool,
    ExtractMemories,
    ModelAnswered,
    NoteEvent,
    RecordMoves,
    Recovered,
    RecoveredTurn,
    ReturnToolError,
    RunTools,
    StartedTools,
    ToolsReturned,
    TurnPhase,
)
from actors.conversation.resumption import INTERRUPTED_CALL, started_payload, started_tools
from actors.conversation.tool_calls import build_catalog
from core.domain import (
    ConcurrencyPolicy,
    Move,
    Persona,
    ToolCallRecord,
    ToolResult,
    Usage,
)
from tests.unit.test_conversation_planning import (
    BACKGROUND,
    BASE,
    NOW,
    SEARCH,
    active_turn,
    call,
    conversation,
    names,
    operation,
    setup,
    turns_only,
)
from tests.unit.test_conversation_planning import drive as drive_all

IDEMPOTENT_SEARCH = SEARCH.model_copy(update={"idempotent": True})


def idempotent_setup() -> AgentSetup:
    base = setup()
    catalog = build_catalog(Persona(id="p", system_prompt="x"), [IDEMPOTENT_SEARCH, BACKGROUND])
    return AgentSetup(base.agent, base.persona, base.profile, catalog)


def tool_move(sequence: int, iteration: int, tool_call_id: str, result: str) -> Move:
    return Move(
        id=f"move-{sequence}",
        turn_id="t1",
        sequence=sequence,
        tool_call=ToolCallRecord(
            id=tool_call_id, tool_id="t-search", name="search", input={"q": "a"}
        ),
        tool_result=ToolResult(tool_call_id=tool_call_id, success=True, result=result),
        raw={"iteration": iteration},
        created_at=NOW,
    )


def drive(state: ConversationState, event: ConversationEvent) -> list[Decision]:
    """Plan and apply; the decisions about turns (the conversation's record is tested in
    test_conversation_planning)."""
    return turns_only(drive_all(state, event))


def resume(recovered: RecoveredTurn, **conv: Any) -> tuple[ConversationState, list[Any]]:
    state = ConversationState(conversation(**conv))
    decisions = drive(state, Recovered((recovered,), NOW))
    return state, decisions


def test_a_turn_cut_during_its_model_call_asks_the_model_again() -> None:
    state, decisions = resume(RecoveredTurn(active_turn(started_at=NOW)))
    assert names(decisions) == ["NoteEvent", "ResumeTurn", "AssembleContext"]
    note = decisions[0]
    assert isinstance(note, NoteEvent) and note.type == "turn.resumed"
    assert note.payload == {"turn_id": "t1", "interruption": 1, "interrupted_calls": []}
    assert state.turns["t1"].phase is TurnPhase.ASSEMBLING
    [_, _, model_call] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert isinstance(model_call, CallModel) and model_call.transcript == ()
    assert state.turns["t1"].resuming is None
    answered = drive(state, ModelAnswered("t1", "the answer", (), Usage(), (), NOW))
    assert names(answered) == ["AddUsage", "AppendAgentMessage", "CompleteTurn"]


def test_recorded_tool_calls_are_replayed_to_the_model_not_run_again() -> None:
    moves = (tool_move(1, 1, "c-search-0", "found a"),)
    state, _ = resume(RecoveredTurn(active_turn(started_at=NOW), moves=moves))
    [_, _, model_call] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert isinstance(model_call, CallModel) and model_call.moves_made == 1
    assistant, tool = model_call.transcript
    assert assistant["tool_calls"][0]["id"] == "c-search-0"  # type: ignore[index]
    assert tool == {"role": "tool", "tool_call_id": "c-search-0", "content": "found a"}
    assert model_call.request.messages[-1] == tool


def test_a_started_call_of_a_tool_not_idempotent_is_reported_interrupted_to_the_model() -> None:
    started = StartedTools(2, "let me look", (call("search", {"q": "b"}, 1),))
    moves = (tool_move(1, 1, "c-search-0", "found a"),)
    recovered = RecoveredTurn(active_turn(started_at=NOW), moves=moves, started=started)
    state, decisions = resume(recovered)
    assert decisions[0].payload["interrupted_calls"] == ["search"]
    [_, _, run] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert isinstance(run, RunTools) and run.iteration == 2 and run.reasoning == "let me look"
    [refused] = run.plans
    assert isinstance(refused, ReturnToolError) and refused.result.error is not None
    assert refused.result.error.message == INTERRUPTED_CALL
    recorded, model_call = drive(state, ToolsReturned("t1", (refused.result,), NOW))
    assert isinstance(recorded, RecordMoves) and recorded.iteration == 2
    assert isinstance(model_call, CallModel) and model_call.moves_made == 2
    assert "interrupted" not in str(model_call.transcript[1])  # the first exchange, as it was
    assert "restarted before its result was recorded" in str(model_call.transcript[-1])


def test_a_started_call_of_an_idempotent_tool_runs_again() -> None:
    started = StartedTools(1, "", (call("search", {"q": "b"}),))
    state, _ = resume(RecoveredTurn(active_turn(started_at=NOW), started=started))
    [_, _, run] = drive(state, ContextAssembled("t1", idempotent_setup(), BASE, NOW))
    assert isinstance(run, RunTools)
    [again] = run.plans
    assert isinstance(again, DispatchTool) and again.input == {"q": "b"}


def test_a_started_async_call_keeps_its_operation_and_is_acknowledged_as_before() -> None:
    op = operation("op-1", tool_call_id="c-report-0")
    started = StartedTools(1, "", (call("report", {}),))
    recovered = RecoveredTurn(active_turn(started_at=NOW), (op,), started=started)
    state, decisions = resume(recovered)
    assert isinstance(decisions[-1], CheckOperations)
    assert state.turns["t1"].pending_operations == {"op-1"}
    [_, _, run] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    [ack] = run.plans  # type: ignore[attr-defined]
    assert isinstance(ack, ReturnToolError) and ack.result.success
    assert ack.result.result["operation_id"] == "op-1"  # type: ignore[index]


def test_a_started_batch_already_recorded_is_not_interrupted() -> None:
    started = StartedTools(1, "", (call("search", {"q": "a"}),))
    moves = (tool_move(1, 1, "c-search-0", "found a"),)
    recovered = RecoveredTurn(active_turn(started_at=NOW), moves=moves, started=started)
    state, _ = resume(recovered)
    [_, _, model_call] = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert isinstance(model_call, CallModel) and model_call.moves_made == 1


def test_an_answered_turn_only_finishes() -> None:
    answer = Move(id="m", turn_id="t1", sequence=1, reasoning="done", created_at=NOW)
    recovered = RecoveredTurn(active_turn(started_at=NOW), moves=(answer,))
    state, _ = resume(recovered)
    decisions = drive(state, ContextAssembled("t1", setup(), BASE, NOW))
    assert names(decisions) == ["AdoptContext", "ResumeLoop", "CompleteTurn"]
    assert isinstance(decisions[-1], CompleteTurn)
    state, _ = resume(recovered)
    decisions = drive(state, ContextAssembled("t1", setup(extraction="task-x"), BASE, NOW))
    assert names(decisions) == ["AdoptContext", "ResumeLoop", "CompleteTurn", "ExtractMemories"]
    assert isinstance(decisions[-1], ExtractMemories) and decisions[-1].turn_id == "t1"


def test_a_resumed_turn_counts_its_interruptions() -> None:
    _, decisions = resume(RecoveredTurn(active_turn(started_at=NOW), resumes=2))
    assert decisions[0].payload["interruption"] == 3


def test_unstarted_turns_queue_behind_a_resumed_one_under_the_queue_policy() -> None:
    turns = (
        RecoveredTurn(active_turn("t1", started_at=NOW)),
        RecoveredTurn(active_turn("t2", started_at=None)),
    )
    state = ConversationState(conversation(ConcurrencyPolicy.QUEUE))
    decisions = drive(state, Recovered(turns, NOW))
    assert names(decisions) == ["NoteEvent", "ResumeTurn", "AssembleContext", "QueueTurn"]


def test_the_started_payload_reads_back() -> None:
    calls = (call("search", {"q": "a"}), call("report", {}, 1))
    payload = started_payload("t1", 3, "why", calls)
    assert started_tools(payload) == StartedTools(3, "why", calls)
