"""The Conversation's state machine: ``plan(state, event) -> decisions``. Pure.

Theory of operation. A conversation has live turns; each is in one ``TurnPhase``. Every outcome
the shell observes comes back as an event; ``plan`` answers with decisions, ``apply`` (in
``folding``) folds them into the state, the shell persists what must survive a crash (one
transaction per batch) and then performs the effects, whose outcomes are the next events:

    message received ─▶ BeginTurn + AssembleContext          (or QueueTurn / Refuse, by policy;
                        an agent's or workflow's call over a turn quota ─▶ BeginTurn + FailTurn)
    context assembled ─▶ CallModel                           (context assembly failed ─▶ FailTurn)
    model answered:  tool calls ─▶ RunTools                  (model failed ─▶ FailTurn; the
                                   day's tokens spent during the call ─▶ FailTurn, reason quota)
                     plain text ─▶ AppendAgentMessage + AwaitOperations | CompleteTurn
                                   (+ ExtractMemories), or the next held delivery
    tools returned ─▶ RecordMoves + CallModel     (without tools once max_moves_per_turn is spent)
    operation completed ─▶ AssembleContext (delivering it) when the turn waits, else HoldDelivery
    memories extracted / extraction failed ─▶ SettleExtraction (the failure noted on the turn)
    cancel requested ─▶ StopWork + CloseDangling + FailTurn
    recovered (actor restart) ─▶ unstarted turns start; answered turns keep waiting for their
                                 operations (lost ones settled); turns cut mid-loop resume
                                 (ResumeTurn + AssembleContext, then ResumeLoop: see
                                 ``resumption``), and fail ``interrupted`` after too many crashes

A turn that ends (completed, failed, or waiting for operations) lets the oldest queued turn start.
Memory extraction runs after its turn completes (seed 001: "the user already saw the response"):
the completion records it as pending, in the same transaction, and ``SettleExtraction`` clears
it; a restarted actor runs the pending ones again (``Recovered.extractions``).
After every batch the conversation's own record follows its turns (``standing``: its status,
``waiting`` / ``failed`` / ``active``, and the users who joined by speaking), as one
``MarkConversation`` when something changed, with no event of its own.
Events about a turn that is no longer live, or not in the phase they answer, are stale (a
cancelled step finishing late) and plan nothing. Nothing here does I/O: no Ray, no store, no
clock, no ids (they arrive in events).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import assert_never

from actors.conversation.approvals import (
    approval_wait,
    decided_plans,
    edit_problem,
    timed_out,
)
from actors.conversation.context import (
    declined,
    operation_result_message,
    request_for_step,
    tool_exchange,
)
from actors.conversation.domain import (
    EDIT,
    AddUsage,
    AdoptContext,
    AgentSetup,
    AppendAgentMessage,
    ApprovalDecided,
    ApprovalTimedOut,
    ApprovalVerdict,
    ApprovalWait,
    AssembleContext,
    AwaitOperations,
    BeginTurn,
    CallModel,
    CancelRequested,
    CheckOperations,
    CloseDangling,
    CompleteTurn,
    CompletionRequested,
    ContextAssembled,
    ContextAssemblyFailed,
    ConversationEvent,
    ConversationState,
    Decision,
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
    RecordMoves,
    Recovered,
    RecoveredTurn,
    Refuse,
    RequestApprovals,
    ResumeLoop,
    ResumeTurn,
    RunTools,
    SaveConversation,
    SettleApproval,
    SettleExtraction,
    SettleOperation,
    StartTurn,
    StepFailed,
    StopWork,
    ToolsReturned,
    TurnPhase,
    TurnRequested,
    TurnState,
    WaitForOperations,
)
from actors.conversation.folding import folded
from actors.conversation.resumption import MAX_INTERRUPTIONS, resumed_plans, resumption_of
from actors.conversation.standing import mark as standing_mark
from actors.conversation.standing import refused
from actors.conversation.tool_calls import plan_tool_calls
from core.domain import (
    AsyncOperation,
    ConcurrencyPolicy,
    ConversationStatus,
    Message,
    MessageRole,
    OperationStatus,
    Participant,
    PendingExtraction,
    ToolError,
    ToolResult,
    Turn,
    TurnStatus,
    Usage,
    UserCaller,
)
from core.errors import ErrorCode
from core.jsontypes import JsonObject
from core.quotas import Refusal, TurnAdmission, check_turn_tokens, refuse_turn, retry_hint

MENTION = re.compile(r"(?<![\w@])@([A-Za-z0-9_.:-]+)")
RESTARTED_MID_TURN = "the conversation restarted mid-turn"
INTERRUPTED = "interrupted"
INTERRUPTED_BY_MESSAGE = "interrupted by a new message"
QUOTA = "quota"  # how a turn refused by a quota's reason starts


def plan(state: ConversationState, event: ConversationEvent) -> list[Decision]:
    """The decisions that follow ``event`` in ``state`` (``state`` is not changed here)."""
    decisions = _plan_event(state, event)
    mark = _mark(state, event, decisions)
    return decisions if mark is None else [*decisions, mark]


def _plan_event(state: ConversationState, event: ConversationEvent) -> list[Decision]:
    match event:
        case (
            MessageReceived()
            | TurnRequested()
            | Recovered()
            | CancelRequested()
            | StepFailed()
            | OperationCompleted()
            | OperationsChecked()
        ):
            return _plan_turns(state, event)
        case (
            ContextAssembled()
            | ContextAssemblyFailed()
            | ModelAnswered()
            | ModelFailed()
            | ToolsReturned()
            | MemoriesExtracted()
            | MemoryExtractionFailed()
        ):
            return _plan_step(state, event)
        case ApprovalDecided(verdict=verdict):
            return _approval_decided(state, verdict)
        case ApprovalTimedOut():
            return _approval_timed_out(state, event)
        case ParticipantAdded() | ParticipantRemoved() | PolicySet() | CompletionRequested():
            return _conversation_changed(state, event)
        case _:
            assert_never(event)


def _plan_turns(
    state: ConversationState,
    event: MessageReceived
    | TurnRequested
    | Recovered
    | CancelRequested
    | StepFailed
    | OperationCompleted
    | OperationsChecked,
) -> list[Decision]:
    """Events that start, stop or feed whole turns."""
    match event:
        case MessageReceived():
            return _message_received(state, event)
        case TurnRequested():
            return _turn_requested(state, event)
        case Recovered():
            return _recovered(state, event)
        case CancelRequested():
            return _cancel(state, event.turn_id, event.reason, event.at, next_=True)
        case StepFailed():
            return _step_failed(state, event)
        case OperationCompleted():
            return _operation_completed(state, event)
        case OperationsChecked():
            return _operations_checked(state, event)
        case _:
            assert_never(event)


def _plan_step(
    state: ConversationState,
    event: ContextAssembled
    | ContextAssemblyFailed
    | ModelAnswered
    | ModelFailed
    | ToolsReturned
    | MemoriesExtracted
    | MemoryExtractionFailed,
) -> list[Decision]:
    """The outcome of a turn's current step (context, model, tools, extraction)."""
    match event:
        case ContextAssembled():
            return _context_assembled(state, event)
        case ContextAssemblyFailed():
            return _context_assembly_failed(state, event)
        case ModelAnswered():
            return _model_answered(state, event)
        case ModelFailed():
            return _model_failed(state, event)
        case ToolsReturned():
            return _tools_returned(state, event)
        case MemoriesExtracted():
            return _memories_extracted(state, event)
        case MemoryExtractionFailed():
            return _memory_extraction_failed(state, event)
        case _:
            assert_never(event)


# --------------------------------------------------------------------------- new turns


def _message_received(state: ConversationState, event: MessageReceived) -> list[Decision]:
    conversation = state.conversation
    if conversation.status is ConversationStatus.COMPLETED:  # a failed one takes the next
        return [Refuse(ErrorCode.CONFLICT, f"conversation {conversation.id} is completed")]
    match addressee(state, event.content, event.requested_agent_id):
        case Refuse() as refusal:
            return [refusal]
        case agent_id:
            pass
    policy = conversation.concurrency_policy
    busy = event.policy_applies and state.busy
    if busy and policy is ConcurrencyPolicy.REJECT:
        rejected = "a turn is active and this conversation rejects messages mid-turn"
        return [Refuse(ErrorCode.CONFLICT, rejected)]
    queue = busy and policy is ConcurrencyPolicy.QUEUE
    turn, message = _new_turn(state, event, agent_id, started=not queue)
    over = _over_quota(event.admission, event.policy_applies)
    if over is not None:  # the call is recorded, and its turn ends at once
        return [BeginTurn(turn, message), _quota_failed(turn.id, over, Usage(), event.at)]
    if queue:
        return [BeginTurn(turn, message), QueueTurn(turn.id, turn.agent_id)]
    decisions: list[Decision] = []
    if busy and policy is ConcurrencyPolicy.INTERRUPT:
        for turn_id in state.running:
            decisions += _cancel(state, turn_id, INTERRUPTED_BY_MESSAGE, event.at, next_=False)
    return [*decisions, BeginTurn(turn, message), AssembleContext(turn.id, agent_id)]


def addressee(state: ConversationState, content: str, requested: str | None) -> str | Refuse | None:
    """Which agent answers: the one asked for, else the first ``@mentioned`` participant, else
    the conversation's primary agent."""
    conversation = state.conversation
    agents = {p.id for p in conversation.participants if p.type == "agent"}
    if requested is not None:
        if requested not in agents and requested != conversation.agent_id:
            message = f"agent {requested} is not a participant of this conversation"
            return Refuse(ErrorCode.INVALID_INPUT, message)
        return requested
    for mention in MENTION.findall(content):
        if mention in agents:
            return str(mention)
    return conversation.agent_id


def _new_turn(
    state: ConversationState, event: MessageReceived, agent_id: str | None, *, started: bool
) -> tuple[Turn, Message]:
    conversation_id = state.conversation.id
    turn = Turn(
        id=event.turn_id,
        conversation_id=conversation_id,
        agent_id=agent_id,
        parent_turn_id=event.parent_turn_id,
        caller=event.caller,
        input=event.content,
        source=event.source,
        reply_to_message_id=event.reply_to_message_id,
        created_at=event.at,
        started_at=event.at if started else None,
        user_id=_acting_user(state, event),
    )
    message = Message(
        id=event.message_id,
        conversation_id=conversation_id,
        turn_id=turn.id,
        role=MessageRole.USER,
        author=event.author,
        content=event.content,
        source=event.source,
        created_at=event.at,
    )
    return turn, message


def _acting_user(state: ConversationState, event: MessageReceived) -> str | None:
    """Whom a new turn works for: as the shell read it, else its user caller (unless the client
    posts as itself)."""
    if event.admission is not None:
        return event.admission.user_id
    match event.caller:
        case UserCaller(user_id=user_id) if user_id != state.conversation.client_id:
            return user_id
        case _:
            return None


def _over_quota(admission: TurnAdmission | None, policy_applies: bool) -> Refusal | None:
    """The quota a call from an agent or a workflow would pass (a user's message was admitted,
    or refused with 429, by the gateway)."""
    if admission is None or policy_applies:
        return None
    return refuse_turn(admission)


def _from_user(turn: Turn) -> bool:
    """Whether a user's message started the turn (the gateway admitted those)."""
    match turn.caller:
        case UserCaller():
            return True
        case _:
            return False


def _quota_failed(turn_id: str, refusal: Refusal, usage: Usage, at: datetime) -> FailTurn:
    """The turn ends with reason ``quota``: retriable once the quota's window reopens."""
    message = f"{refusal.message}; {retry_hint(refusal)}"
    error = ToolError(code=ErrorCode.QUOTA_EXCEEDED, message=message, retriable=True)
    return FailTurn(turn_id, f"{QUOTA}: {message}", usage, False, at, error)


def _turn_requested(state: ConversationState, event: TurnRequested) -> list[Decision]:
    turn = event.turn
    if turn.id in state.turns or turn.status is not TurnStatus.ACTIVE:
        return []  # already running here, or already over
    over = _over_quota(event.admission, event.policy_applies)
    if over is not None:
        return [_quota_failed(turn.id, over, turn.usage, event.at)]
    policy = state.conversation.concurrency_policy
    if event.policy_applies and state.busy and policy is ConcurrencyPolicy.QUEUE:
        return [QueueTurn(turn.id, turn.agent_id)]
    return [StartTurn(turn.id, turn.agent_id, event.at), AssembleContext(turn.id, turn.agent_id)]


def _recovered(state: ConversationState, event: Recovered) -> list[Decision]:
    decisions: list[Decision] = [
        ExtractMemories(pending)
        for pending in event.extractions
        if pending.turn_id not in state.extracting
    ]
    unstarted: list[Turn] = []
    for recovered in event.turns:
        turn = recovered.turn
        if turn.id in state.turns:
            continue
        if turn.started_at is None:
            over = _over_quota(recovered.admission, _from_user(turn))
            if over is not None:
                decisions.append(_quota_failed(turn.id, over, turn.usage, event.at))
                continue
            unstarted.append(turn)
        elif turn.awaiting_operations:
            decisions += _resume_waiting(recovered, event.at)
        else:
            decisions += _resume_interrupted(recovered, event.at)
    queue = state.conversation.concurrency_policy is ConcurrencyPolicy.QUEUE
    resumed = any(isinstance(d, ResumeTurn) for d in decisions) or bool(state.running)
    for n, turn in enumerate(unstarted):
        if queue and (n > 0 or resumed):
            decisions.append(QueueTurn(turn.id, turn.agent_id))
        else:
            decisions += [
                StartTurn(turn.id, turn.agent_id, event.at),
                AssembleContext(turn.id, turn.agent_id),
            ]
    return decisions


def _resume_interrupted(recovered: RecoveredTurn, at: datetime) -> list[Decision]:
    """A turn cut mid-loop continues from what it recorded (``resumption``); after more than
    ``MAX_INTERRUPTIONS`` crashes it fails instead, its operations cancelled."""
    turn = recovered.turn
    ops = recovered.operations
    interruption = recovered.resumes + 1
    if interruption > MAX_INTERRUPTIONS:
        reason = (
            f"{INTERRUPTED}: the conversation restarted {interruption} times during this turn "
            f"(a turn resumes after at most {MAX_INTERRUPTIONS})"
        )
        error = ToolError(code=ErrorCode.UNAVAILABLE, message=reason, retriable=True)
        operations = tuple(op.id for op in ops)
        return [
            CloseDangling(turn.id, (), operations, RESTARTED_MID_TURN, at),
            FailTurn(turn.id, reason, turn.usage, False, at, error),
        ]
    resumption = resumption_of(recovered)
    payload: JsonObject = {
        "turn_id": turn.id,
        "interruption": interruption,
        "interrupted_calls": [call.name for call in resumption.interrupted],
    }
    decisions: list[Decision] = [
        NoteEvent("turn.resumed", payload, at),
        ResumeTurn(turn.id, turn.agent_id, turn.usage, frozenset(op.id for op in ops), resumption),
        AssembleContext(turn.id, turn.agent_id),
    ]
    completed = [op for op in ops if op.status is OperationStatus.COMPLETED]
    decisions += [HoldDelivery(turn.id, op) for op in completed]
    pending = tuple(op for op in ops if op.status is OperationStatus.PENDING)
    if pending:
        decisions.append(CheckOperations(turn.id, turn.agent_id, pending))
    return decisions


def _resume_waiting(recovered: RecoveredTurn, at: datetime) -> list[Decision]:
    """An answered turn whose actor restarted: completed operations are delivered (again, if the
    crash came before their delivery committed), pending ones are checked with the runner."""
    turn = recovered.turn
    ops = recovered.operations
    decisions: list[Decision] = [
        WaitForOperations(turn.id, turn.agent_id, frozenset(op.id for op in ops), turn.usage)
    ]
    completed = [op for op in ops if op.status is OperationStatus.COMPLETED]
    decisions += _deliveries(turn.id, turn.agent_id, completed, free=True)
    pending = tuple(op for op in ops if op.status is OperationStatus.PENDING)
    if pending:
        decisions.append(CheckOperations(turn.id, turn.agent_id, pending))
    return decisions


# --------------------------------------------------------------------------- the model loop


def _context_assembled(state: ConversationState, event: ContextAssembled) -> list[Decision]:
    turn = _live(state, event.turn_id, TurnPhase.ASSEMBLING)
    if turn is None:
        return []
    if turn.resuming is not None:
        adopt = AdoptContext(turn.turn_id, event.setup, event.base, event.hook_run_id)
        return [adopt, *_resumed(state, turn, event)]
    transcript = (operation_result_message(turn.delivering),) if turn.delivering else ()
    tools_allowed = event.setup.max_moves > 0
    request = request_for_step(event.base, transcript, tools_allowed)
    return [
        AdoptContext(turn.turn_id, event.setup, event.base, event.hook_run_id),
        CallModel(turn.turn_id, request, event.setup.profile, transcript, 0),
    ]


def _resumed(state: ConversationState, turn: TurnState, event: ContextAssembled) -> list[Decision]:
    """A resumed turn's loop goes on where its previous incarnation was cut (``resumption``)."""
    resumption = turn.resuming
    assert resumption is not None
    setup = event.setup
    transcript, moves_made = resumption.transcript, resumption.moves_made
    loop = ResumeLoop(turn.turn_id, transcript, moves_made)
    if resumption.answered:
        ending = _finish(state, turn.turn_id, setup, turn.usage, event.at)
        return [loop, *ending]
    if resumption.approving is not None:  # its last answer still waits for decisions
        wait = resumption.approving
        return [loop, *_held_or_run(state, turn.turn_id, setup, wait, event.at, announce=False)]
    if resumption.interrupted:
        plans = resumed_plans(resumption, setup.catalog)
        return [
            loop,
            RunTools(turn.turn_id, setup.agent.id, plans, resumption.reasoning, moves_made + 1),
        ]
    request = request_for_step(event.base, transcript, moves_made < setup.max_moves)
    return [loop, CallModel(turn.turn_id, request, setup.profile, transcript, moves_made)]


def _context_assembly_failed(
    state: ConversationState, event: ContextAssemblyFailed
) -> list[Decision]:
    turn = _live(state, event.turn_id, TurnPhase.ASSEMBLING)
    if turn is None:
        return []
    payload = {"turn_id": turn.turn_id, "error": event.error.model_dump(mode="json")}
    reason = f"context assembly failed: {event.error.message}"
    return [
        NoteEvent("context_assembly.failed", payload, event.at),
        FailTurn(
            turn.turn_id,
            reason,
            turn.usage,
            True,
            event.at,
            event.error,
            context_assembly_run_id=event.hook_run_id,
        ),
        *_start_next(state, turn.turn_id, event.at),
    ]


def _model_answered(state: ConversationState, event: ModelAnswered) -> list[Decision]:
    turn = _live(state, event.turn_id, TurnPhase.THINKING)
    if turn is None or turn.setup is None:
        return []
    usage = turn.usage + event.usage
    decisions: list[Decision] = [AddUsage(turn.turn_id, usage)]
    agent_id = turn.setup.agent.id
    if not event.tool_calls:
        return [*decisions, *_answered(state, turn, agent_id, event.text, usage, event.at)]
    reason = declined(event.tool_calls, turn.base.tools if turn.base is not None else ())
    if reason is not None:
        refusal = ToolError(code=ErrorCode.AGENT_DECLINED, message=reason, retriable=False)
        return [
            *decisions,
            FailTurn(turn.turn_id, f"declined: {reason}", usage, False, event.at, refusal),
            *_start_next(state, turn.turn_id, event.at),
        ]
    if turn.moves_made >= turn.setup.max_moves:
        # It was asked to answer without tools and called some anyway: stop, do not loop.
        reason = f"the model kept calling tools after its {turn.setup.max_moves} moves"
        return [
            *decisions,
            FailTurn(turn.turn_id, reason, usage, False, event.at),
            *_start_next(state, turn.turn_id, event.at),
        ]
    spent = usage.prompt_tokens + usage.completion_tokens
    over = check_turn_tokens(spent, event.tokens_left, event.at)
    if over is not None:
        # The day's tokens ran out during this call: its answer was paid for, but its tool
        # calls are not run, since only another model call could use their results.
        return [
            *decisions,
            _quota_failed(turn.turn_id, over, usage, event.at),
            *_start_next(state, turn.turn_id, event.at),
        ]
    plans = plan_tool_calls(
        event.tool_calls,
        turn.setup.catalog,
        state.conversation.id,
        turn.turn_id,
        event.operation_ids,
        event.at,
        event.schema_problems,
    )
    iteration = turn.moves_made + 1
    wait = approval_wait(
        turn.setup, turn.turn_id, plans, event.operation_ids, event.text, iteration, event.at
    )
    if wait is not None:  # some calls wait for a person: the answer's calls are held
        return [*decisions, RequestApprovals(turn.turn_id, wait)]
    return [*decisions, RunTools(turn.turn_id, agent_id, plans, event.text, iteration)]


def _answered(
    state: ConversationState,
    turn: TurnState,
    agent_id: str,
    text: str,
    usage: Usage,
    at: datetime,
) -> list[Decision]:
    """The model answered without tool calls: the answer, then whatever the turn waits for."""
    delivering = turn.delivering
    delivered = delivering.id if delivering is not None else None
    decisions: list[Decision] = [AppendAgentMessage(turn.turn_id, agent_id, text, delivered, at)]
    remaining = turn.pending_operations - {delivered}
    if turn.deliveries:
        next_op = turn.deliveries[0]
        return [*decisions, AssembleContext(turn.turn_id, turn.agent_id, delivering=next_op)]
    if remaining:
        return [
            *decisions,
            AwaitOperations(turn.turn_id, usage, announce=not turn.awaiting_recorded),
            *_start_next(state, turn.turn_id, at),
        ]
    return [*decisions, *_finish(state, turn.turn_id, turn.setup, usage, at, agent_id)]


def _finish(
    state: ConversationState,
    turn_id: str,
    setup: AgentSetup | None,
    usage: Usage,
    at: datetime,
    agent_id: str | None = None,
) -> list[Decision]:
    """Nothing pending: the turn completes, then its memory extraction runs when the persona
    has one (recorded as pending with the completion)."""
    task_id = setup.extraction_task_id if setup is not None else None
    if not task_id or setup is None:
        return [CompleteTurn(turn_id, usage, at), *_start_next(state, turn_id, at)]
    pending = PendingExtraction(
        conversation_id=state.conversation.id,
        turn_id=turn_id,
        agent_id=agent_id or setup.agent.id,
        task_id=task_id,
        workflow=setup.extraction_is_workflow,
    )
    return [
        CompleteTurn(turn_id, usage, at, extraction=pending),
        ExtractMemories(pending),
        *_start_next(state, turn_id, at),
    ]


def _model_failed(state: ConversationState, event: ModelFailed) -> list[Decision]:
    turn = _live(state, event.turn_id, TurnPhase.THINKING)
    if turn is None:
        return []
    return [
        FailTurn(turn.turn_id, event.error.message, turn.usage, False, event.at, event.error),
        *_start_next(state, turn.turn_id, event.at),
    ]


def _tools_returned(state: ConversationState, event: ToolsReturned) -> list[Decision]:
    turn = _live(state, event.turn_id, TurnPhase.ACTING)
    if turn is None or turn.setup is None or turn.base is None:
        return []
    calls = turn.open_calls
    moves_made = turn.moves_made + 1
    transcript = (*turn.transcript, *tool_exchange(calls, event.results))
    tools_allowed = moves_made < turn.setup.max_moves
    request = request_for_step(turn.base, transcript, tools_allowed)
    return [
        RecordMoves(
            turn.turn_id,
            calls,
            event.results,
            turn.last_text,
            moves_made,
            event.at,
            turn.agent_calls,
        ),
        CallModel(turn.turn_id, request, turn.setup.profile, transcript, moves_made),
    ]


def _live(state: ConversationState, turn_id: str, phase: TurnPhase) -> TurnState | None:
    turn = state.turns.get(turn_id)
    return turn if turn is not None and turn.phase is phase else None


# --------------------------------------------------------------------------- approvals


def _held_or_run(
    state: ConversationState,
    turn_id: str,
    setup: AgentSetup,
    wait: ApprovalWait,
    at: datetime,
    *,
    announce: bool,
) -> list[Decision]:
    """The answer's calls wait while a request is undecided, else run as decided."""
    if wait.pending:
        return [RequestApprovals(turn_id, wait, announce)]
    plans = decided_plans(wait, setup.catalog, state.conversation.id, turn_id, at)
    return [RunTools(turn_id, setup.agent.id, plans, wait.reasoning, wait.iteration)]


def _waiting_for(state: ConversationState, approval_id: str) -> TurnState | None:
    """The live turn whose held answer has the request ``approval_id``."""
    for turn in state.turns.values():
        wait = turn.approval
        if turn.phase is TurnPhase.APPROVING and wait is not None:
            if any(r.approval_id == approval_id for r in wait.requests):
                return turn
    return None


def _approval_decided(state: ConversationState, verdict: ApprovalVerdict) -> list[Decision]:
    turn = _waiting_for(state, verdict.approval_id)
    if turn is None or turn.approval is None or turn.setup is None:
        return [Refuse(ErrorCode.NOT_FOUND, f"no tool call waits as {verdict.approval_id}")]
    wait = turn.approval
    request = next(r for r in wait.requests if r.approval_id == verdict.approval_id)
    if request not in wait.pending:
        return [Refuse(ErrorCode.CONFLICT, f"{verdict.approval_id} is decided already")]
    if verdict.decision == EDIT:
        if verdict.arguments is None:
            return [Refuse(ErrorCode.INVALID_INPUT, "an edit gives the call's arguments")]
        problem = edit_problem(wait, request, verdict.arguments, turn.setup.catalog)
        if problem is not None:
            return [Refuse(ErrorCode.INVALID_INPUT, f"the edited arguments: {problem}")]
    return _settle(state, turn, wait, verdict)


def _approval_timed_out(state: ConversationState, event: ApprovalTimedOut) -> list[Decision]:
    turn = _waiting_for(state, event.approval_id)
    if turn is None or turn.approval is None:
        return []  # decided meanwhile, or its turn is over
    wait = turn.approval
    request = next((r for r in wait.pending if r.approval_id == event.approval_id), None)
    if request is None:
        return []
    return _settle(state, turn, wait, timed_out(request, event.at))


def _settle(
    state: ConversationState, turn: TurnState, wait: ApprovalWait, verdict: ApprovalVerdict
) -> list[Decision]:
    assert turn.setup is not None
    request = next(r for r in wait.requests if r.approval_id == verdict.approval_id)
    decided = replace(wait, verdicts=(*wait.verdicts, verdict))
    last = not decided.pending
    settle = SettleApproval(turn.turn_id, request, verdict, last)
    if not last:
        return [settle]
    ran = _held_or_run(state, turn.turn_id, turn.setup, decided, verdict.at, announce=False)
    return [settle, *ran]


# --------------------------------------------------------------------------- async operations


def _operation_completed(state: ConversationState, event: OperationCompleted) -> list[Decision]:
    op = event.operation
    turn = state.turns.get(op.turn_id)
    if turn is None:
        # Its turn is over (failed, cancelled): nobody will answer with it.
        cancelled = op.model_copy(update={"status": OperationStatus.CANCELLED})
        return [SettleOperation(cancelled)]
    if op.id not in turn.pending_operations or _already_delivering(turn, op.id):
        return []  # delivered already, or this very delivery is under way
    return _deliveries(turn.turn_id, turn.agent_id, [op], free=_free(turn))


def _operations_checked(state: ConversationState, event: OperationsChecked) -> list[Decision]:
    turn = state.turns.get(event.turn_id)
    if turn is None:
        return []
    lost = [_lost(op) for op in event.lost if op.id in turn.pending_operations]
    settled: list[Decision] = [SettleOperation(op) for op in lost]
    return [*settled, *_deliveries(turn.turn_id, turn.agent_id, lost, free=_free(turn))]


def _deliveries(
    turn_id: str, agent_id: str | None, ops: Sequence[AsyncOperation], *, free: bool
) -> list[Decision]:
    """Answer the first operation now when the turn is free, hold the rest for later."""
    decisions: list[Decision] = []
    for op in ops:
        if free:
            decisions.append(AssembleContext(turn_id, agent_id, delivering=op))
            free = False
        else:
            decisions.append(HoldDelivery(turn_id, op))
    return decisions


def _free(turn: TurnState) -> bool:
    return turn.phase is TurnPhase.AWAITING and turn.delivering is None


def _already_delivering(turn: TurnState, op_id: str) -> bool:
    held = {op.id for op in turn.deliveries}
    return (turn.delivering is not None and turn.delivering.id == op_id) or op_id in held


def _lost(op: AsyncOperation) -> AsyncOperation:
    error = ToolError(
        code=ErrorCode.EXECUTION_FAILED, message="the operation was lost", retriable=True
    )
    result = ToolResult(tool_call_id=op.tool_call_id, success=False, error=error)
    return op.model_copy(update={"status": OperationStatus.COMPLETED, "result": result})


# --------------------------------------------------------------------------- the end of a turn


def _memories_extracted(state: ConversationState, event: MemoriesExtracted) -> list[Decision]:
    if event.turn_id not in state.extracting:
        return []
    return [SettleExtraction(event.turn_id, False, event.at, event.hook_run_id)]


def _memory_extraction_failed(
    state: ConversationState, event: MemoryExtractionFailed
) -> list[Decision]:
    """The turn stays completed (the user has its answer); the failure is noted on it."""
    if event.turn_id not in state.extracting:
        return []
    payload = {"turn_id": event.turn_id, "error": event.error.model_dump(mode="json")}
    return [
        NoteEvent("memory_extraction.failed", payload, event.at),
        SettleExtraction(event.turn_id, True, event.at, event.hook_run_id),
    ]


def _cancel(
    state: ConversationState, turn_id: str, reason: str, at: datetime, *, next_: bool
) -> list[Decision]:
    """Stop a live turn: its open tool calls and pending operations get an error result."""
    turn = state.turns.get(turn_id)
    if turn is None:
        return []
    message = f"the turn was cancelled: {reason}"
    operations = tuple(sorted(turn.pending_operations))
    decisions: list[Decision] = [
        StopWork(turn_id),
        CloseDangling(turn_id, turn.open_calls, operations, message, at),
        FailTurn(turn_id, reason, turn.usage, False, at, cancelled=True),
    ]
    return [*decisions, *_start_next(state, turn_id, at)] if next_ else decisions


def _step_failed(state: ConversationState, event: StepFailed) -> list[Decision]:
    turn = state.turns.get(event.turn_id)
    if turn is None and event.turn_id in state.extracting:  # the extraction step itself
        error = ToolError(code=ErrorCode.INTERNAL_ERROR, message=event.reason, retriable=True)
        return _memory_extraction_failed(
            state, MemoryExtractionFailed(event.turn_id, error, event.at)
        )
    if turn is None:
        return []
    decisions: list[Decision] = []
    if turn.open_calls:
        message = f"the turn failed: {event.reason}"
        decisions.append(CloseDangling(turn.turn_id, turn.open_calls, (), message, event.at))
    return [
        *decisions,
        FailTurn(turn.turn_id, event.reason, turn.usage, False, event.at, event.error),
        *_start_next(state, turn.turn_id, event.at),
    ]


def _start_next(state: ConversationState, ending: str, at: datetime) -> list[Decision]:
    """When ``ending`` stops running and nothing else runs, the oldest queued turn starts."""
    if any(turn_id != ending for turn_id in state.running):
        return []
    queued = [turn_id for turn_id in state.queue if turn_id != ending]
    if not queued:
        return []
    following = state.turns[queued[0]]
    return [
        StartTurn(following.turn_id, following.agent_id, at),
        AssembleContext(following.turn_id, following.agent_id),
    ]


# --------------------------------------------------------------------------- the conversation


def _conversation_changed(
    state: ConversationState,
    event: ParticipantAdded | ParticipantRemoved | PolicySet | CompletionRequested,
) -> list[Decision]:
    conversation = state.conversation
    participants = conversation.participants
    match event:
        case ParticipantAdded(agent_id=agent_id, at=at):
            if any(p.id == agent_id for p in participants):
                return []
            joined = [*participants, Participant(type="agent", id=agent_id)]
            updated = conversation.model_copy(update={"participants": joined})
            return [SaveConversation(updated, "participant_joined", {"agent_id": agent_id}, at)]
        case ParticipantRemoved(agent_id=agent_id, at=at):
            if agent_id == conversation.agent_id:
                message = "the primary agent cannot leave its conversation"
                return [Refuse(ErrorCode.CONFLICT, message)]
            left = [p for p in participants if p.id != agent_id]
            if len(left) == len(participants):
                return [Refuse(ErrorCode.NOT_FOUND, f"agent {agent_id} is not a participant")]
            updated = conversation.model_copy(update={"participants": left})
            return [SaveConversation(updated, "participant_left", {"agent_id": agent_id}, at)]
        case PolicySet(policy=policy, at=at):
            updated = conversation.model_copy(update={"concurrency_policy": policy})
            payload = {"concurrency_policy": policy.value}
            return [SaveConversation(updated, "conversation_updated", payload, at)]
        case CompletionRequested(at=at):
            done = ConversationStatus.COMPLETED
            updated = conversation.model_copy(update={"status": done})
            return [SaveConversation(updated, "conversation_ended", {"status": done.value}, at)]
        case _:
            assert_never(event)


# ------------------------------------------------------------------------ the conversation's record


def _mark(
    state: ConversationState, event: ConversationEvent, decisions: list[Decision]
) -> MarkConversation | None:
    """The conversation row's change after ``decisions`` (``standing``), judged on the state as
    the decisions will leave it."""
    if not decisions or refused(decisions):
        return None
    return standing_mark(event, decisions, folded(state, decisions))
