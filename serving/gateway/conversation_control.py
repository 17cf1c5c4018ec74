"""Steering a live conversation: cancel a turn, set the mid-turn policy, loop agents in and out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import ConcurrencyPolicy
from core.errors import NotFound
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context
from serving.gateway.conversations import owned_conversation
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1/conversations/{conversation_id}", tags=["conversations"])


class PolicyUpdate(WireModel):
    concurrency_policy: ConcurrencyPolicy = Field(
        description="What a message arriving mid-turn does: parallel | queue | reject | interrupt"
    )


class ParticipantAdd(WireModel):
    agent_id: str = Field(min_length=1, max_length=64)


class CancelTurn(WireModel):
    reason: str = Field("cancelled", min_length=1, max_length=200)


@router.put("/policy", summary="Set what a message arriving mid-turn does")
async def set_policy(
    conversation_id: str, body: PolicyUpdate, context: Context, client_id: ClientId, audit: Audit
) -> dict[str, Any]:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    change = await context.conversations.set_policy(conversation_id, body.concurrency_policy)
    details = {"concurrency_policy": change.concurrency_policy.value}
    target = f"conversations:{conversation_id}"
    await run_in_threadpool(audit.record, "conversation.policy", target, details)
    return {"concurrency_policy": change.concurrency_policy.value}


@router.post(
    "/turns/{turn_id}/cancel",
    summary="Cancel an active turn; its open tool calls are closed with an error result",
)
async def cancel_turn(
    conversation_id: str,
    turn_id: str,
    context: Context,
    client_id: ClientId,
    body: CancelTurn | None = None,
) -> dict[str, Any]:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    turn = await run_in_threadpool(context.store.turns.get, turn_id)
    if turn.conversation_id != conversation_id:
        raise NotFound(f"turn {turn_id} not found")
    reason = (body or CancelTurn()).reason
    outcome = await context.conversations.cancel_turn(conversation_id, turn_id, reason)
    return {"turn_id": outcome.turn_id, "status": outcome.status.value}


@router.post("/participants", status_code=201, summary="Loop an agent into the conversation")
async def add_participant(
    conversation_id: str, body: ParticipantAdd, context: Context, client_id: ClientId, audit: Audit
) -> dict[str, Any]:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    await run_in_threadpool(context.store.agents.get, body.agent_id, client_id)
    change = await context.conversations.add_participant(conversation_id, body.agent_id)
    if change.joined:
        details = {"conversation_id": conversation_id, "agent_id": body.agent_id}
        target = f"conversations:{conversation_id}"
        await run_in_threadpool(audit.record, "membership.add", target, details)
    return {"agent_id": change.agent_id, "joined": change.joined}


@router.delete("/participants/{agent_id}", summary="Remove a looped-in agent")
async def remove_participant(
    conversation_id: str, agent_id: str, context: Context, client_id: ClientId, audit: Audit
) -> dict[str, Any]:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    change = await context.conversations.remove_participant(conversation_id, agent_id)
    if change.left:
        details = {"conversation_id": conversation_id, "agent_id": agent_id}
        target = f"conversations:{conversation_id}"
        await run_in_threadpool(audit.record, "membership.remove", target, details)
    return {"agent_id": change.agent_id, "left": change.left}
