"""How a turn cut mid-loop by a crash continues on the conversation's next incarnation. Pure.

What survives a crash is what the store holds: the turn's recorded moves (each model answer's
tool calls with their results, written together once they all return), the ``tools.started``
event written before those calls run, and the async operations they started. So:

- recorded tool exchanges are replayed to the model as they were: none is run again;
- the calls of an answer that started but whose results were never recorded are the
  *interrupted* ones: an async call whose operation is stored is acknowledged as it was (the
  operation goes on); a call to a tool declared ``idempotent`` is run again; any other call gets
  an error result saying it was interrupted and may or may not have taken effect, and the model
  decides what to do;
- a turn whose answer is stored only has what follows the answer left (memory extraction);
- an answer whose calls were held for approvals (``approvals``) is held again, with the
  decisions recorded so far; a call a person denied stays denied when its answer's calls run;
- otherwise the model step that was running is simply asked again.

A turn resumes after at most ``MAX_INTERRUPTIONS`` crashes; the next one fails it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from actors.conversation.approvals import denials
from actors.conversation.context import tool_exchange
from actors.conversation.domain import (
    DispatchTool,
    RecoveredTurn,
    Resumption,
    ReturnToolError,
    StartedTools,
    ToolCatalog,
    ToolPlan,
)
from actors.conversation.tool_calls import async_ack, plan_tool_call
from core.domain import Move, ToolError, ToolResult
from core.errors import ErrorCode
from core.jsontypes import JsonObject
from core.llm.protocol import ToolCallRequested

MAX_INTERRUPTIONS = 3
RECOVERY_EVENTS = ("tools.started", "turn.resumed")  # what recovery reads back from the log
INTERRUPTED_CALL = (
    "This call was cut short: the conversation restarted before its result was recorded, so it "
    "may or may not have taken effect. It was not run again because the tool is not declared "
    "idempotent. Decide whether to call it again."
)


def resumption_of(recovered: RecoveredTurn) -> Resumption:
    """Where an interrupted turn picks up, from what its previous incarnation recorded."""
    transcript, moves_made = recorded_exchanges(recovered.moves)
    answered = any(move.tool_call is None for move in recovered.moves)
    started = recovered.started
    wait = recovered.approval
    if not answered and wait is not None and wait.iteration > moves_made:
        if started is None or started.iteration < wait.iteration:
            # Its last answer was waiting for approvals: it waits again for what is undecided.
            return Resumption(transcript, moves_made, approving=wait)
    if answered or started is None or started.iteration <= moves_made:
        return Resumption(transcript, moves_made, answered=answered)
    operations = {op.tool_call_id: op.id for op in recovered.operations}
    return Resumption(
        transcript,
        started.iteration - 1,
        started.calls,
        started.reasoning,
        {call.id: operations[call.id] for call in started.calls if call.id in operations},
        denied=denials(wait) if wait is not None and wait.iteration == started.iteration else {},
    )


def recorded_exchanges(moves: Sequence[Move]) -> tuple[tuple[JsonObject, ...], int]:
    """The turn's recorded tool moves as the model saw them, and how many moves it made."""
    by_iteration: dict[int, list[Move]] = {}
    for move in sorted(moves, key=lambda m: m.sequence):
        iteration = (move.raw or {}).get("iteration")
        if move.tool_call is None or move.tool_result is None or not isinstance(iteration, int):
            continue
        by_iteration.setdefault(iteration, []).append(move)
    transcript: list[JsonObject] = []
    for iteration in sorted(by_iteration):
        group = by_iteration[iteration]
        calls = [recorded_call(move) for move in group]
        results = [move.tool_result for move in group if move.tool_result is not None]
        transcript += tool_exchange(calls, results)
    return tuple(transcript), max(by_iteration, default=0)


def recorded_call(move: Move) -> ToolCallRequested:
    assert move.tool_call is not None
    record = move.tool_call
    raw = record.input.get("_raw")
    arguments = raw if isinstance(raw, str) else json.dumps(record.input)
    return ToolCallRequested(id=record.id, name=record.name, arguments=arguments)


def resumed_plans(resumption: Resumption, catalog: ToolCatalog) -> tuple[ToolPlan, ...]:
    """What becomes of each interrupted call (see the module's docstring)."""
    plans: list[ToolPlan] = []
    for call in resumption.interrupted:
        if call.id in resumption.denied:  # a person denied it: it never ran, and does not now
            plans.append(ReturnToolError(call, resumption.denied[call.id]))
            continue
        operation_id = resumption.operation_ids.get(call.id)
        if operation_id is not None:
            plans.append(ReturnToolError(call, async_ack(call.id, operation_id)))
            continue
        match plan_tool_call(call, catalog):
            case DispatchTool(tool=tool) as dispatch if tool.idempotent and not tool.is_async:
                plans.append(dispatch)
            case DispatchTool():
                plans.append(ReturnToolError(call, interrupted_result(call)))
            case ReturnToolError() as refused:
                plans.append(refused)
    return tuple(plans)


def interrupted_result(call: ToolCallRequested) -> ToolResult:
    error = ToolError(code=ErrorCode.EXECUTION_FAILED, message=INTERRUPTED_CALL, retriable=True)
    return ToolResult(tool_call_id=call.id, success=False, error=error)


def started_tools(payload: JsonObject) -> StartedTools:
    """A ``tools.started`` event's payload, read back."""
    calls = payload.get("calls")
    iteration = payload.get("iteration")
    return StartedTools(
        iteration=iteration if isinstance(iteration, int) else 1,
        reasoning=str(payload.get("reasoning") or ""),
        calls=tuple(
            ToolCallRequested(
                id=str(c.get("id")), name=str(c.get("name")), arguments=str(c.get("arguments"))
            )
            for c in (calls if isinstance(calls, list) else [])
            if isinstance(c, dict)
        ),
    )


def started_payload(
    turn_id: str, iteration: int, reasoning: str, calls: Sequence[ToolCallRequested]
) -> JsonObject:
    """The payload of ``tools.started`` (what ``started_tools`` reads back)."""
    return {
        "turn_id": turn_id,
        "iteration": iteration,
        "reasoning": reasoning,
        "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }
