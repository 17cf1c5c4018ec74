"""What each decision writes: the rows and the events that announce them (the shell's persist step).

``writes_for`` turns one batch of decisions into ``PendingWrite``s that ``ConversationLog.commit``
runs in one transaction, so a crash leaves either all of a batch or none of it. Decisions that are
pure effects (call the model, run tools...) write nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import assert_never

from sqlalchemy import Connection

from actors.conversation.approvals import decided_payload, requested_payload
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
    WaitForOperations,
)
from actors.conversation.log import PendingEvent, PendingWrite, turn_payload
from actors.conversation.resumption import started_payload
from actors.conversation.tool_calls import call_arguments
from actors.conversation.tool_dispatch import invocation_mode
from core.approvals import DECIDED, REQUESTED
from core.domain import (
    AsyncOperation,
    Conversation,
    ConversationStatus,
    Event,
    Message,
    MessageRole,
    Move,
    OperationStatus,
    Participant,
    PendingExtraction,
    ToolCallRecord,
    ToolError,
    ToolResult,
    Turn,
    TurnStatus,
)
from core.errors import ErrorCode
from core.ids import new_id
from core.jsontypes import JsonObject
from core.llm.protocol import ToolCallRequested
from core.store import Store

WAITING = (OperationStatus.PENDING, OperationStatus.COMPLETED)


def agent_calls_started(turn_id: str, plans: Sequence[ToolPlan]) -> list[PendingEvent]:
    """``agent_call.started`` for each call the turn dispatches to an agent."""
    return [
        PendingEvent(
            "agent_call.started",
            {
                "turn_id": turn_id,
                "tool_call_id": plan.call.id,
                "tool": plan.call.name,
                "agent_id": plan.tool.target_id,
                "mode": invocation_mode(plan),
            },
        )
        for plan in plans
        if isinstance(plan, DispatchTool) and plan.tool.target_type == "agent"
    ]


def agent_calls_completed(
    turn_id: str,
    pairs: Sequence[tuple[ToolCallRequested, ToolResult]],
    agent_calls: Sequence[str],
) -> list[PendingEvent]:
    """``agent_call.completed`` for each of those calls, with the child it ran in."""
    events = []
    for call, result in pairs:
        if call.id not in agent_calls:
            continue
        answer = result.result if isinstance(result.result, dict) else {}
        payload: JsonObject = {
            "turn_id": turn_id,
            "tool_call_id": call.id,
            "tool": call.name,
            "success": result.success,
            "agent_id": answer.get("agent_id"),
            "child_conversation_id": answer.get("conversation_id"),
            "child_turn_id": answer.get("turn_id"),
        }
        if result.error is not None:
            payload["error"] = result.error.model_dump(mode="json")
        events.append(PendingEvent("agent_call.completed", payload))
    return events


def operation_started(plan: StartOperation) -> JsonObject:
    """``operation.started``: the operation, its tool call and, for an agent tool, the agent and
    how it is invoked (a delegation or a loop-in running in the background)."""
    op = plan.operation
    payload: JsonObject = {
        "turn_id": op.turn_id,
        "operation_id": op.id,
        "tool": op.tool_name,
        "tool_call_id": op.tool_call_id,
    }
    tool = plan.tool
    if tool is not None and tool.target_type == "agent":
        payload["agent_id"] = tool.target_id
        payload["mode"] = invocation_mode(DispatchTool(call=plan.call, tool=tool, input=op.input))
    return payload


def operation_delivered(turn_id: str, op: AsyncOperation) -> JsonObject:
    """``operation.delivered``: how the operation ended and, for a delegation, the child
    conversation it ran in."""
    payload: JsonObject = {"turn_id": turn_id, "operation_id": op.id}
    result = op.result
    if result is None:
        return payload
    payload["success"] = result.success
    if result.error is not None:
        payload["error"] = result.error.model_dump(mode="json")
    answer = result.result if isinstance(result.result, dict) else {}
    child = answer.get("conversation_id")
    if isinstance(child, str) and child != op.conversation_id:
        payload["child_conversation_id"] = child
    return payload


def _hook_run(run_id: str | None) -> dict[str, str]:
    return {} if run_id is None else {"context_assembly_run_id": run_id}


class BatchWriter:
    """Builds the writes of one planning batch (move numbers are counted across the batch)."""

    def __init__(
        self, store: Store, conversation_id: str, context_runs: Mapping[str, str] | None = None
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        # Each live turn's adopted context hook run (``TurnState.context_run_id``), stored on the
        # turn with its next save: a hooked turn's way to the model has no write of its own.
        self.context_runs = context_runs or {}
        self.acks: dict[str, Message] = {}  # turn id -> its input message, numbered
        self._next_move: dict[str, int] = {}

    def writes_for(self, decisions: Sequence[Decision]) -> list[PendingWrite]:
        writes = [self._write(d) for d in decisions]
        return [w for w in writes if w is not None]

    def _write(self, decision: Decision) -> PendingWrite | None:
        match decision:
            case BeginTurn() | StartTurn() | AwaitOperations() | CompleteTurn() | FailTurn():
                return self._turn(decision)
            case RunTools():
                return self._tools_started(decision)
            case RequestApprovals() | SettleApproval():
                return self._approvals(decision)
            case RecordMoves() | AppendAgentMessage() | CloseDangling():
                return self._moves(decision)
            case SettleOperation(operation=operation):
                return PendingWrite([], lambda c, _e: self._save_operation(operation, c))
            case SettleExtraction(turn_id=turn_id, failed=failed, hook_run_id=run_id):
                return PendingWrite(
                    [], lambda c, _e: self._settle_extraction(turn_id, failed, run_id, c)
                )
            case NoteEvent(type=event_type, payload=payload):
                return PendingWrite([PendingEvent(event_type, payload)])
            case SaveConversation(conversation=conversation, event=event, payload=payload):
                return PendingWrite(
                    [PendingEvent(event, payload)],
                    lambda c, _e: self._save_conversation(conversation, c),
                )
            case MarkConversation(status=status, joined=joined):
                return PendingWrite([], lambda c, _e: self._mark_conversation(status, joined, c))
            case (
                Refuse()
                | QueueTurn()
                | ResumeTurn()
                | ResumeLoop()
                | WaitForOperations()
                | AssembleContext()
                | AdoptContext()
                | CallModel()
                | AddUsage()
                | HoldDelivery()
                | ExtractMemories()
                | StopWork()
                | CheckOperations()
            ):
                return None
            case _:
                assert_never(decision)

    # ------------------------------------------------------------------ turns

    def _turn(
        self, decision: BeginTurn | StartTurn | AwaitOperations | CompleteTurn | FailTurn
    ) -> PendingWrite | None:
        match decision:
            case BeginTurn(turn=turn, message=message):
                return self._begin(turn, message)
            case StartTurn(turn_id=turn_id, at=at):
                return PendingWrite([], lambda c, _e: self._mark_started(turn_id, at, c))
            case AwaitOperations(turn_id=turn_id, usage=usage, announce=announce):
                run = _hook_run(self.context_runs.get(turn_id))
                if not announce:

                    def write(conn: Connection, _events: list[Event]) -> None:
                        self._update_turn(turn_id, conn, usage=usage, **run)

                    return PendingWrite([], write)
                return self._turn_change(
                    turn_id, "turn.awaiting", {}, None, awaiting_operations=True, usage=usage, **run
                )
            case CompleteTurn(turn_id=turn_id, usage=usage, at=at, extraction=extraction):
                return self._turn_change(
                    turn_id,
                    "turn.completed",
                    {},
                    also=None if extraction is None else self._extraction_pending(extraction),
                    status=TurnStatus.COMPLETED,
                    completed_at=at,
                    awaiting_operations=False,
                    awaiting_approval=False,
                    usage=usage,
                    memory_extraction_pending=extraction is not None,
                    **_hook_run(self.context_runs.get(turn_id)),
                )
            case FailTurn(turn_id=turn_id, reason=reason, usage=usage, at=at, error=error):
                extra: JsonObject = {"reason": reason}
                if error is not None:
                    extra["error"] = error.model_dump(mode="json")
                return self._turn_change(
                    turn_id,
                    "turn.failed",
                    extra,
                    None,
                    status=TurnStatus.FAILED,
                    failure_reason=reason,
                    failure_code=None if error is None else error.code,
                    completed_at=at,
                    awaiting_operations=False,
                    awaiting_approval=False,
                    usage=usage,
                    context_failed=decision.context_failed,
                    **_hook_run(decision.context_assembly_run_id or self.context_runs.get(turn_id)),
                )
            case _:
                assert_never(decision)

    def _begin(self, turn: Turn, message: Message) -> PendingWrite:
        def write(conn: Connection, events: list[Event]) -> None:
            numbered = message.model_copy(update={"seq": events[1].seq})
            events[1].payload["message"] = numbered.model_dump(mode="json")
            self.store.turns.insert(turn, conn)
            self.store.messages.insert(numbered, conn)
            self.acks[turn.id] = numbered

        return PendingWrite(
            [PendingEvent("turn.started", turn_payload(turn)), PendingEvent("message")], write
        )

    def _mark_started(self, turn_id: str, at: datetime, conn: Connection) -> None:
        turn = self.store.turns.get(turn_id, conn)
        if turn.started_at is None:
            self.store.turns.save(turn.model_copy(update={"started_at": at}), conn)

    def _update_turn(self, turn_id: str, conn: Connection, **changes: object) -> Turn:
        turn = self.store.turns.get(turn_id, conn)
        issues = turn.issues
        if "memory_extraction_pending" in changes:
            pending = changes.pop("memory_extraction_pending")
            issues = issues.model_copy(update={"memory_extraction_pending": pending})
        if changes.pop("memory_extraction_failed", False):
            issues = issues.model_copy(update={"memory_extraction_failed": True})
        if changes.pop("context_failed", False):
            issues = issues.model_copy(update={"context_assembly_failed": True})
        if changes.get("status") is TurnStatus.COMPLETED:
            failures = sum(
                1
                for m in self.store.moves.list(turn_id, conn)
                if m.tool_result is not None and not m.tool_result.success
            )
            issues = issues.model_copy(update={"tool_failures": failures})
        updated = turn.model_copy(update={**changes, "issues": issues})
        self.store.turns.save(updated, conn)
        return updated

    def _turn_change(
        self,
        turn_id: str,
        event_type: str,
        extra: JsonObject,
        also: Callable[[Connection], None] | None = None,
        **changes: object,
    ) -> PendingWrite:
        def write(conn: Connection, events: list[Event]) -> None:
            updated = self._update_turn(turn_id, conn, **changes)
            events[0].payload.update({**turn_payload(updated), **extra})
            if also is not None:
                also(conn)

        return PendingWrite([PendingEvent(event_type)], write)

    # ------------------------------------------------------------------ memory extraction

    def _extraction_pending(self, extraction: PendingExtraction) -> Callable[[Connection], None]:
        return lambda conn: self.store.pending_extractions.add(extraction, conn)

    def _settle_extraction(
        self, turn_id: str, failed: bool, run_id: str | None, conn: Connection
    ) -> None:
        """The extraction is over: the turn says so (and whether it failed, and which hook run
        it was), the row goes."""
        changes: dict[str, object] = {}
        if run_id is not None:
            changes["memory_extraction_run_id"] = run_id
        self._update_turn(
            turn_id,
            conn,
            memory_extraction_pending=False,
            memory_extraction_failed=failed,
            **changes,
        )
        self.store.pending_extractions.remove(self.conversation_id, turn_id, conn)

    # ------------------------------------------------------------------ approvals

    def _approvals(self, decision: RequestApprovals | SettleApproval) -> PendingWrite | None:
        """``approval.requested`` for each held call that waits (the turn marked awaiting its
        approvals), or ``approval.decided`` (unmarked once none waits)."""
        match decision:
            case RequestApprovals(turn_id=turn_id, wait=wait, announce=announce):
                if not announce:
                    return None
                events = [
                    PendingEvent(REQUESTED, requested_payload(turn_id, wait, request))
                    for request in wait.pending
                ]
                waiting = True
            case SettleApproval(turn_id=turn_id, verdict=verdict, last=last):
                events = [PendingEvent(DECIDED, decided_payload(turn_id, verdict))]
                waiting = not last
            case _:
                assert_never(decision)

        def write(conn: Connection, _events: list[Event]) -> None:
            self._update_turn(turn_id, conn, awaiting_approval=waiting)

        return PendingWrite(events, write)

    # ------------------------------------------------------------------ operations

    def _tools_started(self, decision: RunTools) -> PendingWrite:
        """``tools.started`` (intent first: a crash before the results are recorded leaves what
        was started, for ``resumption``), and the async operations, stored before they run."""
        calls = [plan.call for plan in decision.plans]
        started = PendingEvent(
            "tools.started",
            started_payload(decision.turn_id, decision.iteration, decision.reasoning, calls),
        )
        delegations = agent_calls_started(decision.turn_id, decision.plans)
        operations = self._operations_started(decision.plans)
        if operations is None:
            return PendingWrite([started, *delegations])
        return PendingWrite([started, *delegations, *operations.events], operations.write)

    def _operations_started(self, plans: Sequence[ToolPlan]) -> PendingWrite | None:
        started: list[StartOperation] = []
        for plan in plans:
            match plan:
                case StartOperation():
                    started.append(plan)
                case DispatchTool() | ReturnToolError():
                    pass
                case _:
                    assert_never(plan)
        if not started:
            return None
        operations = [plan.operation for plan in started]

        def write(conn: Connection, _events: list[Event]) -> None:
            for op in operations:
                self.store.async_operations.insert(op, conn)

        events = [PendingEvent("operation.started", operation_started(plan)) for plan in started]
        return PendingWrite(events, write)

    def _save_operation(self, operation: AsyncOperation, conn: Connection) -> None:
        self.store.async_operations.save(operation, conn)

    def _save_conversation(self, conversation: Conversation, conn: Connection) -> None:
        self.store.conversations.save(conversation, conn)

    def _mark_conversation(
        self, status: ConversationStatus, joined: tuple[Participant, ...], conn: Connection
    ) -> None:
        """Onto the row as stored (another writer, ``intake``, may have marked it too)."""
        stored = self.store.conversations.get(self.conversation_id, conn=conn)
        known = {(p.type, p.id) for p in stored.participants}
        participants = [*stored.participants, *(p for p in joined if (p.type, p.id) not in known)]
        if stored.status is ConversationStatus.COMPLETED:
            status = stored.status  # a user completed it meanwhile
        update = {"status": status, "participants": participants}
        self.store.conversations.save(stored.model_copy(update=update), conn)

    # ------------------------------------------------------------------ moves and messages

    def _move_number(self, turn_id: str, conn: Connection) -> int:
        if turn_id not in self._next_move:
            self._next_move[turn_id] = self.store.moves.count(turn_id, conn) + 1
        number = self._next_move[turn_id]
        self._next_move[turn_id] = number + 1
        return number

    def _moves(self, decision: RecordMoves | AppendAgentMessage | CloseDangling) -> PendingWrite:
        match decision:
            case RecordMoves():
                return self._tool_moves(decision)
            case AppendAgentMessage():
                return self._answer(decision)
            case CloseDangling():
                return self._closed(decision)
            case _:
                assert_never(decision)

    def _tool_moves(self, decision: RecordMoves) -> PendingWrite:
        pairs = list(zip(decision.calls, decision.results, strict=True))
        failures = [
            PendingEvent(
                "tool.failed",
                {
                    "turn_id": decision.turn_id,
                    "tool": call.name,
                    "error": result.error.model_dump(mode="json") if result.error else None,
                },
            )
            for call, result in pairs
            if not result.success
        ]

        def write(conn: Connection, events: list[Event]) -> None:
            for n, (call, result) in enumerate(pairs):
                move = Move(
                    id=new_id("move"),
                    turn_id=decision.turn_id,
                    sequence=self._move_number(decision.turn_id, conn),
                    reasoning=(decision.reasoning or None) if n == 0 else None,
                    tool_call=ToolCallRecord(
                        id=call.id, tool_id=call.name, name=call.name, input=call_arguments(call)
                    ),
                    tool_result=result,
                    raw={"iteration": decision.iteration},
                    created_at=decision.at,
                )
                self.store.moves.insert(move, conn)
                events[n].payload["move"] = move.model_dump(mode="json")

        completed = agent_calls_completed(decision.turn_id, pairs, decision.agent_calls)
        return PendingWrite([*(PendingEvent("move") for _ in pairs), *failures, *completed], write)

    def _answer(self, decision: AppendAgentMessage) -> PendingWrite:
        delivers = decision.delivers

        def write(conn: Connection, events: list[Event]) -> None:
            move = Move(
                id=new_id("move"),
                turn_id=decision.turn_id,
                sequence=self._move_number(decision.turn_id, conn),
                reasoning=decision.content,
                raw={"delivers": delivers} if delivers else None,
                created_at=decision.at,
            )
            self.store.moves.insert(move, conn)
            events[0].payload["move"] = move.model_dump(mode="json")
            if delivers is not None:
                # The answer and the operation's delivery commit together: a crash before this
                # commit re-delivers, after it never does.
                op = self.store.async_operations.get(delivers, conn)
                delivered = op.model_copy(update={"status": OperationStatus.DELIVERED})
                self.store.async_operations.save(delivered, conn)
                events[1].payload.update(operation_delivered(decision.turn_id, op))
            message = Message(
                id=new_id("msg"),
                conversation_id=self.conversation_id,
                turn_id=decision.turn_id,
                role=MessageRole.AGENT,
                author=decision.agent_id,
                content=decision.content,
                source="agent",
                seq=events[-1].seq,
                created_at=decision.at,
            )
            events[-1].payload["message"] = message.model_dump(mode="json")
            self.store.messages.insert(message, conn)

        events = [PendingEvent("move")]
        if delivers is not None:
            events.append(
                PendingEvent(
                    "operation.delivered", {"turn_id": decision.turn_id, "operation_id": delivers}
                )
            )
        return PendingWrite([*events, PendingEvent("message")], write)

    def _closed(self, decision: CloseDangling) -> PendingWrite:
        """Error results for open calls and pending operations; the operations are cancelled."""
        error = ToolError(code=ErrorCode.EXECUTION_FAILED, message=decision.message)
        count = len(decision.calls) + len(decision.operations)

        def write(conn: Connection, events: list[Event]) -> None:
            calls = [(c.id, c.name, call_arguments(c)) for c in decision.calls]
            for op_id in decision.operations:
                op = self.store.async_operations.get(op_id, conn)
                calls.append((op.tool_call_id, op.tool_name, op.input))
                if op.status in WAITING:
                    cancelled = op.model_copy(update={"status": OperationStatus.CANCELLED})
                    self.store.async_operations.save(cancelled, conn)
            for n, (call_id, name, arguments) in enumerate(calls):
                move = Move(
                    id=new_id("move"),
                    turn_id=decision.turn_id,
                    sequence=self._move_number(decision.turn_id, conn),
                    tool_call=ToolCallRecord(id=call_id, tool_id=name, name=name, input=arguments),
                    tool_result=ToolResult(tool_call_id=call_id, success=False, error=error),
                    raw={"closed": True},
                    created_at=decision.at,
                )
                self.store.moves.insert(move, conn)
                events[n].payload["move"] = move.model_dump(mode="json")

        return PendingWrite([PendingEvent("move") for _ in range(count)], write)
