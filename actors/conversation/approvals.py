"""Tool calls that wait for a person's approval, in the turn loop. Pure.

When the model's answer calls a tool whose calls need approval (``approval_policy``: the
persona's ``constraints.approvals`` by tool name or ``*``, else the tool's own ``approval``), the
answer's calls are held (``RequestApprovals``: the turn is ``approving``), one request per call
that needs it. Each request is decided by a person (approve; edit: run with other arguments,
valid for the tool's schema; deny: the model hears that it was denied) or by its timeout
(``on_timeout``, deny by default). Once none is pending the answer's calls run as one batch
(``RunTools``), as if the model had made them as decided. A restarted conversation rebuilds the
wait from its log (``core.approvals``) and waits for what is still undecided.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from actors.conversation.domain import (
    APPROVE,
    DENY,
    EDIT,
    AgentSetup,
    ApprovalRequest,
    ApprovalVerdict,
    ApprovalWait,
    DispatchTool,
    ReturnToolError,
    StartOperation,
    ToolCatalog,
    ToolPlan,
)
from actors.conversation.tool_calls import call_arguments, plan_tool_call, plan_tool_calls
from core.approvals import (
    TIMEOUT,
    ApprovalDecided,
    ApprovalLog,
    ApprovalRequested,
    RecordedCall,
)
from core.domain import ApprovalPolicy, Tool, ToolError, ToolResult
from core.errors import ErrorCode
from core.jsontypes import JsonObject
from core.llm.protocol import ToolCallRequested

DENIED = "A person denied this call; it did not run."
TIMED_OUT = "Nobody approved this call within {timeout_s} s; it did not run."


def approval_policy(setup: AgentSetup, tool: Tool) -> ApprovalPolicy | None:
    """Whether ``tool``'s calls wait for approval, and how (the persona's rule wins)."""
    rules = setup.persona.constraints.approvals
    return rules.get(tool.name) or rules.get("*") or tool.approval


def approval_id(operation_id: str) -> str:
    """One request's id, from the fresh id its call was given (``ModelAnswered.operation_ids``):
    unique to this call of this answer, and the same when a restarted turn reads it back."""
    return f"approval_{operation_id.removeprefix('op_')}"


def approval_wait(
    setup: AgentSetup,
    turn_id: str,
    plans: Sequence[ToolPlan],
    operation_ids: Sequence[str],
    reasoning: str,
    iteration: int,
    at: datetime,
) -> ApprovalWait | None:
    """The wait for the answer's calls that need approval (None: none does, they run now).
    A call refused anyway (unknown tool, bad arguments) needs none."""
    requests: list[ApprovalRequest] = []
    for index, plan in enumerate(plans):
        match plan:
            case DispatchTool(call=call) | StartOperation(call=call):
                tool = setup.catalog.by_name.get(call.name)
                policy = approval_policy(setup, tool) if tool is not None else None
                if policy is None:
                    continue
                requests.append(
                    ApprovalRequest(
                        approval_id=approval_id(operation_ids[index]),
                        tool_call_id=call.id,
                        tool=call.name,
                        arguments=call_arguments(call),
                        timeout_s=policy.timeout_s,
                        on_timeout=policy.on_timeout,
                        requested_at=at,
                        expires_at=at + timedelta(seconds=policy.timeout_s),
                    )
                )
            case ReturnToolError():
                pass
    if not requests:
        return None
    calls = tuple(plan.call for plan in plans)
    return ApprovalWait(iteration, reasoning, calls, tuple(operation_ids), tuple(requests))


def edit_problem(
    wait: ApprovalWait, request: ApprovalRequest, arguments: JsonObject, catalog: ToolCatalog
) -> str | None:
    """Why edited arguments cannot run (not valid for the tool's schema...); None: they can."""
    call = _call(wait, request.tool_call_id)
    planned = plan_tool_call(_edited(call, arguments), catalog)
    match planned:
        case ReturnToolError(result=result):
            return result.error.message if result.error is not None else "invalid arguments"
        case DispatchTool():
            return None


def timed_out(request: ApprovalRequest, at: datetime) -> ApprovalVerdict:
    """What an undecided request becomes when its time is up."""
    decision = APPROVE if request.on_timeout == "approve" else DENY
    reason = TIMED_OUT.format(timeout_s=request.timeout_s)
    return ApprovalVerdict(request.approval_id, decision, TIMEOUT, at, reason=reason)


def decided_plans(
    wait: ApprovalWait, catalog: ToolCatalog, conversation_id: str, turn_id: str, at: datetime
) -> tuple[ToolPlan, ...]:
    """The answer's calls as decided: approved ones as the model made them, edited ones with
    their new arguments, denied ones answered with the denial (they do not run)."""
    by_call = {r.tool_call_id: r for r in wait.requests}
    verdicts = {v.approval_id: v for v in wait.verdicts}
    calls: list[ToolCallRequested] = []
    for call in wait.calls:
        request = by_call.get(call.id)
        verdict = verdicts.get(request.approval_id) if request is not None else None
        if verdict is not None and verdict.decision == EDIT and verdict.arguments is not None:
            call = _edited(call, verdict.arguments)
        calls.append(call)
    plans = plan_tool_calls(calls, catalog, conversation_id, turn_id, wait.operation_ids, at)
    out: list[ToolPlan] = []
    for plan in plans:
        request = by_call.get(plan.call.id)
        verdict = verdicts.get(request.approval_id) if request is not None else None
        if verdict is not None and verdict.decision == DENY:
            out.append(ReturnToolError(plan.call, denial(plan.call.id, verdict)))
        else:
            out.append(plan)
    return tuple(out)


def denial(tool_call_id: str, verdict: ApprovalVerdict) -> ToolResult:
    """What the model hears of a denied call."""
    if verdict.decided_by == TIMEOUT:
        message = verdict.reason or DENIED
    elif verdict.reason:
        message = f"{DENIED} Reason: {verdict.reason}"
    else:
        message = DENIED
    error = ToolError(code=ErrorCode.PERMISSION_DENIED, message=message, retriable=False)
    return ToolResult(tool_call_id=tool_call_id, success=False, error=error)


def _call(wait: ApprovalWait, tool_call_id: str) -> ToolCallRequested:
    return next(call for call in wait.calls if call.id == tool_call_id)


def _edited(call: ToolCallRequested, arguments: JsonObject) -> ToolCallRequested:
    return replace(call, arguments=json.dumps(arguments))


# --------------------------------------------------------------------------- the log's records


def requested_payload(turn_id: str, wait: ApprovalWait, request: ApprovalRequest) -> JsonObject:
    """``approval.requested`` (``core.approvals.ApprovalRequested``)."""
    record = ApprovalRequested(
        turn_id=turn_id,
        approval_id=request.approval_id,
        tool_call_id=request.tool_call_id,
        tool=request.tool,
        arguments=request.arguments,
        timeout_s=request.timeout_s,
        on_timeout="approve" if request.on_timeout == "approve" else "deny",
        requested_at=request.requested_at,
        expires_at=request.expires_at,
        iteration=wait.iteration,
        reasoning=wait.reasoning,
        calls=[RecordedCall(id=c.id, name=c.name, arguments=c.arguments) for c in wait.calls],
        operation_ids=list(wait.operation_ids),
    )
    return record.model_dump(mode="json")


def decided_payload(turn_id: str, verdict: ApprovalVerdict) -> JsonObject:
    """``approval.decided`` (``core.approvals.ApprovalDecided``)."""
    decision = verdict.decision
    record = ApprovalDecided(
        turn_id=turn_id,
        approval_id=verdict.approval_id,
        decision="edit" if decision == EDIT else "deny" if decision == DENY else "approve",
        arguments=verdict.arguments,
        reason=verdict.reason,
        decided_by=verdict.decided_by,
        decided_at=verdict.at,
    )
    return record.model_dump(mode="json")


def recorded_waits(log: ApprovalLog) -> dict[str, ApprovalWait]:
    """Each turn's last recorded wait (its last answer that asked for approvals), with the
    decisions recorded for it, as a restarted conversation finds them."""
    by_answer: dict[tuple[str, int], list[ApprovalRequested]] = {}
    for requested in log.requested.values():
        by_answer.setdefault((requested.turn_id, requested.iteration), []).append(requested)
    waits: dict[str, ApprovalWait] = {}
    for (turn_id, iteration), group in sorted(by_answer.items()):
        first = group[0]
        calls = tuple(
            ToolCallRequested(id=c.id, name=c.name, arguments=c.arguments) for c in first.calls
        )
        requests = tuple(_request(r) for r in group)
        verdicts = tuple(
            _verdict(log.decided[r.approval_id]) for r in group if r.approval_id in log.decided
        )
        wait = ApprovalWait(
            iteration, first.reasoning, calls, tuple(first.operation_ids), requests, verdicts
        )
        waits[turn_id] = wait  # a later answer's wait replaces an earlier one's
    return waits


def _request(requested: ApprovalRequested) -> ApprovalRequest:
    return ApprovalRequest(
        approval_id=requested.approval_id,
        tool_call_id=requested.tool_call_id,
        tool=requested.tool,
        arguments=requested.arguments,
        timeout_s=requested.timeout_s,
        on_timeout=requested.on_timeout,
        requested_at=requested.requested_at,
        expires_at=requested.expires_at,
    )


def _verdict(decided: ApprovalDecided) -> ApprovalVerdict:
    return ApprovalVerdict(
        approval_id=decided.approval_id,
        decision=decided.decision,
        decided_by=decided.decided_by,
        at=decided.decided_at,
        arguments=decided.arguments,
        reason=decided.reason,
    )


def denials(wait: ApprovalWait) -> dict[str, ToolResult]:
    """The denied calls of a decided wait, with what the model hears of each."""
    by_id = {r.approval_id: r for r in wait.requests}
    return {
        by_id[v.approval_id].tool_call_id: denial(by_id[v.approval_id].tool_call_id, v)
        for v in wait.verdicts
        if v.decision == DENY and v.approval_id in by_id
    }
