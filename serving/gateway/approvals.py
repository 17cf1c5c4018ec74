"""Tool calls waiting for a person's approval: list them, and decide (approve, edit, deny).

``GET /v1/conversations/{id}/approvals`` lists the calls of the conversation's active turns that
wait (read from its log, ``core.approvals``); ``POST …/approvals/{approval_id}`` decides one. The
decision goes to the conversation's actor, the log's one writer, which records it and lets the
turn go on (an edit's arguments are checked against the tool's input schema there: 422). A
member needs the level that writes the conversation (``member_access``); a non-member gets 404,
as for a call that does not exist; a call decided already is 409. The stream takes the same
decision as an ``approval`` frame (``serving.gateway.stream``), through ``decide``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from core.approvals import EVENT_TYPES, ApprovalLog, ApprovalOutcome, PendingApproval
from core.domain import TurnStatus
from core.errors import Conflict, NotFound
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, User
from serving.gateway.context import GatewayContext
from serving.gateway.conversations import owned_conversation
from serving.gateway.protocol import ApprovalDecision, WireModel

router = APIRouter(prefix="/v1/conversations/{conversation_id}/approvals", tags=["approvals"])


class PendingApprovals(WireModel):
    items: list[PendingApproval]


def approval_log(context: GatewayContext, conversation_id: str) -> ApprovalLog:
    return ApprovalLog(context.store.events.list_of_types(conversation_id, EVENT_TYPES))


def active_turns(context: GatewayContext, conversation_id: str) -> frozenset[str]:
    active = context.store.turns.list(conversation_id, status=TurnStatus.ACTIVE)
    return frozenset(turn.id for turn in active)


def pending(context: GatewayContext, client_id: str, conversation_id: str) -> PendingApprovals:
    owned_conversation(context, client_id, conversation_id)
    log = approval_log(context, conversation_id)
    return PendingApprovals(items=log.pending(active_turns(context, conversation_id)))


def check_waiting(
    context: GatewayContext, client_id: str, conversation_id: str, approval_id: str
) -> None:
    """404 unless the conversation (the client's) asked for ``approval_id``; 409 once decided
    (or once its turn ended)."""
    owned_conversation(context, client_id, conversation_id)
    log = approval_log(context, conversation_id)
    requested = log.requested.get(approval_id)
    if requested is None:
        raise NotFound(f"approval {approval_id} not found")
    if approval_id in log.decided:
        raise Conflict(f"approval {approval_id} is decided already")
    if requested.turn_id not in active_turns(context, conversation_id):
        raise Conflict(f"approval {approval_id}: its turn is over")


async def decide(
    context: GatewayContext,
    client_id: str,
    conversation_id: str,
    approval_id: str,
    body: ApprovalDecision,
    decided_by: str,
) -> ApprovalOutcome:
    """Check, then hand the decision to the conversation's actor (the log's writer)."""
    await run_in_threadpool(check_waiting, context, client_id, conversation_id, approval_id)
    return await context.conversations.decide_approval(
        conversation_id, approval_id, body.decision, decided_by, body.arguments, body.reason
    )


@router.get("", response_model=PendingApprovals, summary="Tool calls waiting for approval")
async def list_approvals(
    conversation_id: str, context: Context, client_id: ClientId
) -> PendingApprovals:
    return await run_in_threadpool(pending, context, client_id, conversation_id)


@router.post(
    "/{approval_id}",
    response_model=ApprovalOutcome,
    summary="Approve, edit or deny a tool call waiting for approval",
)
async def decide_approval(
    conversation_id: str,
    approval_id: str,
    body: ApprovalDecision,
    context: Context,
    client_id: ClientId,
    user: User,
    audit: Audit,
) -> ApprovalOutcome:
    outcome = await decide(
        context, client_id, conversation_id, approval_id, body, user or client_id
    )
    details: dict[str, Any] = {"approval_id": approval_id, "decision": body.decision}
    target = f"conversations:{conversation_id}"
    await run_in_threadpool(audit.record, "approval.decide", target, details)
    return outcome
