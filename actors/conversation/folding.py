"""How the conversation's decisions fold into its state: ``apply(state, decision)``. Pure.

``planning.plan`` answers an event with decisions; the shell persists what they write, then
applies each one here to the state it holds in memory, then performs their effects (the store is
the shell's: ``records``, ``log``). ``folded`` applies a batch to a copy of the state, for
``planning`` to judge what the batch leaves behind (``standing``). A turn begins, queues, starts,
moves through its ``TurnPhase``s, holds deliveries and waits on operations, and leaves the state
when it completes or fails. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import assert_never

from actors.conversation.domain import (
    AddUsage,
    AdoptContext,
    AppendAgentMessage,
    AssembleContext,
    AwaitOperations,
    BeginTurn,
    CallModel,
    CheckOperations,
    CloseDangling,
    CompleteTurn,
    ConversationState,
    Decision,
    DispatchTool,
    ExtractMemories,
    FailTurn,
    HoldDelivery,
    MarkConversation,
    NoteEvent,
    QueueTurn,
    RecordMoves,
    Refuse,
    RequestApprovals,
    ResumeLoop,
    ResumeTurn,
    ReturnToolError,
    RunTools,
    SaveConversation,
    SettleApproval,
    SettleExtraction,
    SettleOperation,
    StartOperation,
    StartTurn,
    StopWork,
    ToolPlan,
    TurnPhase,
    TurnState,
    WaitForOperations,
)
from core.domain import OperationStatus


def apply(state: ConversationState, decision: Decision) -> None:
    """Fold one decision into the state (the state is in memory; the store is the shell's)."""
    match decision:
        case (
            BeginTurn()
            | QueueTurn()
            | StartTurn()
            | ResumeTurn()
            | WaitForOperations()
            | CompleteTurn()
            | FailTurn()
            | SaveConversation()
        ):
            _apply_lifecycle(state, decision)
        case (
            AssembleContext()
            | AdoptContext()
            | ResumeLoop()
            | CallModel()
            | AddUsage()
            | RunTools()
            | RecordMoves()
            | AwaitOperations()
        ):
            _apply_step(state.turns[decision.turn_id], decision)
        case RequestApprovals(turn_id=turn_id, wait=wait):
            held = state.turns[turn_id]
            held.phase, held.approval = TurnPhase.APPROVING, wait
            held.open_calls, held.last_text = wait.calls, wait.reasoning
        case SettleApproval(turn_id=turn_id, verdict=verdict):
            waiting = state.turns[turn_id]
            if waiting.approval is not None:
                verdicts = (*waiting.approval.verdicts, verdict)
                waiting.approval = replace(waiting.approval, verdicts=verdicts)
        case ExtractMemories(extraction=extraction):
            state.extracting[extraction.turn_id] = extraction
        case SettleExtraction(turn_id=turn_id):
            state.extracting.pop(turn_id, None)
        case AppendAgentMessage() | HoldDelivery() | CloseDangling() | SettleOperation():
            _apply_delivery(state, decision)
        case MarkConversation(status=status, joined=joined):
            participants = [*state.conversation.participants, *joined]
            update = {"status": status, "participants": participants}
            state.conversation = state.conversation.model_copy(update=update)
        case Refuse() | NoteEvent() | StopWork() | CheckOperations():
            pass  # no state of their own: the shell acts on them
        case _:
            assert_never(decision)


def folded(state: ConversationState, decisions: list[Decision]) -> ConversationState:
    """``state`` as it will be once ``decisions`` are applied (a shallow copy: ``apply``
    replaces a turn's fields, never changes what they hold)."""
    after = ConversationState(
        state.conversation,
        {turn_id: replace(turn) for turn_id, turn in state.turns.items()},
        list(state.queue),
        dict(state.extracting),
    )
    for decision in decisions:
        apply(after, decision)
    return after


def _apply_lifecycle(
    state: ConversationState,
    decision: BeginTurn
    | QueueTurn
    | StartTurn
    | ResumeTurn
    | WaitForOperations
    | CompleteTurn
    | FailTurn
    | SaveConversation,
) -> None:
    match decision:
        case BeginTurn(turn=turn):
            state.turns[turn.id] = TurnState(turn.id, turn.agent_id, TurnPhase.QUEUED)
        case QueueTurn(turn_id=turn_id, agent_id=agent_id):
            _ensure(state, turn_id, agent_id)
            state.queue.append(turn_id)
        case StartTurn(turn_id=turn_id, agent_id=agent_id):
            _ensure(state, turn_id, agent_id)
            if turn_id in state.queue:
                state.queue.remove(turn_id)
        case ResumeTurn(turn_id=turn_id, agent_id=agent_id):
            state.turns[turn_id] = TurnState(
                turn_id,
                agent_id,
                TurnPhase.QUEUED,
                pending_operations=decision.operations,
                usage=decision.usage,
                resuming=decision.resumption,
            )
        case WaitForOperations(turn_id=turn_id, agent_id=agent_id):
            state.turns[turn_id] = TurnState(
                turn_id,
                agent_id,
                TurnPhase.AWAITING,
                pending_operations=decision.operations,
                usage=decision.usage,
                awaiting_recorded=True,
            )
        case CompleteTurn(turn_id=turn_id) | FailTurn(turn_id=turn_id):
            state.turns.pop(turn_id, None)
            if turn_id in state.queue:
                state.queue.remove(turn_id)
        case SaveConversation(conversation=conversation):
            state.conversation = conversation
        case _:
            assert_never(decision)


def _apply_step(
    turn: TurnState,
    decision: AssembleContext
    | AdoptContext
    | ResumeLoop
    | CallModel
    | AddUsage
    | RunTools
    | RecordMoves
    | AwaitOperations,
) -> None:
    match decision:
        case AssembleContext(delivering=delivering):
            turn.phase = TurnPhase.ASSEMBLING
            turn.delivering = delivering
            if delivering is not None:
                turn.deliveries = tuple(op for op in turn.deliveries if op.id != delivering.id)
        case AdoptContext(setup=setup, base=base, hook_run_id=run_id):
            turn.setup, turn.base = setup, base
            turn.context_run_id = run_id or turn.context_run_id
        case ResumeLoop(transcript=transcript, moves_made=moves_made):
            turn.transcript, turn.moves_made, turn.resuming = transcript, moves_made, None
        case CallModel(transcript=transcript, moves_made=moves_made):
            turn.phase = TurnPhase.THINKING
            turn.transcript, turn.moves_made = transcript, moves_made
        case AddUsage(usage=usage):
            turn.usage = usage
        case RunTools(plans=plans, reasoning=reasoning):
            turn.phase, turn.approval = TurnPhase.ACTING, None
            turn.open_calls = tuple(p.call for p in plans)
            turn.agent_calls = agent_call_ids(plans)
            turn.last_text = reasoning
            turn.pending_operations = turn.pending_operations | started_operations(plans)
        case RecordMoves():
            turn.open_calls = ()
            turn.agent_calls = ()
        case AwaitOperations():
            turn.phase = TurnPhase.AWAITING
            turn.awaiting_recorded = True
        case _:
            assert_never(decision)


def _apply_delivery(
    state: ConversationState,
    decision: AppendAgentMessage | HoldDelivery | CloseDangling | SettleOperation,
) -> None:
    match decision:
        case AppendAgentMessage(turn_id=turn_id, delivers=delivers):
            answered = state.turns[turn_id]
            if delivers is not None:
                answered.pending_operations = answered.pending_operations - {delivers}
                answered.delivering = None
        case HoldDelivery(turn_id=turn_id, operation=operation):
            holder = state.turns[turn_id]
            holder.deliveries = (*holder.deliveries, operation)
        case CloseDangling(turn_id=turn_id, operations=operations):
            closed = state.turns.get(turn_id)
            if closed is not None:
                closed.open_calls = ()
                closed.pending_operations = closed.pending_operations - set(operations)
        case SettleOperation(operation=operation):
            owner = state.turns.get(operation.turn_id)
            if owner is not None and operation.status is OperationStatus.CANCELLED:
                owner.pending_operations = owner.pending_operations - {operation.id}
        case _:
            assert_never(decision)


def agent_call_ids(plans: Sequence[ToolPlan]) -> tuple[str, ...]:
    """The calls among a turn's tool plans dispatched to an agent (delegate or loop in)."""
    return tuple(
        plan.call.id
        for plan in plans
        if isinstance(plan, DispatchTool) and plan.tool.target_type == "agent"
    )


def started_operations(plans: Sequence[ToolPlan]) -> frozenset[str]:
    """The ids of the async operations among a turn's tool plans."""
    started: set[str] = set()
    for tool_plan in plans:
        match tool_plan:
            case StartOperation(operation=operation):
                started.add(operation.id)
            case DispatchTool() | ReturnToolError():
                pass
            case _:
                assert_never(tool_plan)
    return frozenset(started)


def _ensure(state: ConversationState, turn_id: str, agent_id: str | None) -> TurnState:
    if turn_id not in state.turns:
        state.turns[turn_id] = TurnState(turn_id, agent_id, TurnPhase.QUEUED)
    return state.turns[turn_id]
