"""A recorded model call's context window: ``GET /v1/conversations/{id}/turns/{turn_id}/calls/
{call_id}/context`` (``core.context_window``), read-only.

The call is found among the turn's records, read as ``calls.list_calls`` reads them: through a
conversation the client may read (its own turns or a fork's inherited ones); any other id is a 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from core.context_window import ContextWindow, context_window
from core.errors import InvalidInput, NotFound
from core.model_calls import ModelCallRecord
from core.record_sink import load_bodies
from core.settings import Settings
from serving.gateway.auth import ClientId, Context
from serving.gateway.calls import MAX_CALLS, _objects, readable_turn
from serving.gateway.context import GatewayContext
from serving.llm_config import model_plans

router = APIRouter(prefix="/v1/conversations/{conversation_id}/turns/{turn_id}/calls")


def recorded_call(
    context: GatewayContext, client_id: str, conversation_id: str, turn_id: str, call_id: str
) -> ModelCallRecord:
    """The turn's recorded call ``call_id``, its bodies loaded; ``NotFound`` otherwise."""
    readable_turn(context, client_id, conversation_id, turn_id)
    for call in context.store.records.calls(turn_ids=[turn_id], limit=MAX_CALLS):
        if call.id == call_id:
            if call.request_ref or call.response_ref:
                call = load_bodies(call, _objects(context))
            return call
    raise NotFound(f"model call {call_id} not found in turn {turn_id}")


def served_window(settings: Settings, provider: str, model: str) -> int | None:
    """The context length the local deployment serving ``model`` states (None: not stated)."""
    if provider != "vllm":
        return None
    try:
        plans = model_plans(settings)
    except InvalidInput:
        return None
    for plan in plans:
        if model == plan.name or model in plan.served_names:
            return plan.max_model_len
    return None


@router.get(
    "/{call_id}/context",
    response_model=ContextWindow,
    tags=["turns"],
    summary="A model call's context window: system prompt, memories, history and tool specs, "
    "each with its estimated tokens, against the model's window",
)
def call_context(
    conversation_id: str, turn_id: str, call_id: str, context: Context, client_id: ClientId
) -> Any:
    call = recorded_call(context, client_id, conversation_id, turn_id, call_id)
    if call.request is None:
        raise NotFound(f"the request of model call {call_id} is not available")
    return context_window(
        call.id,
        call.provider,
        call.model,
        call.request,
        call.usage.prompt_tokens if call.status == "ok" else None,
        served_window(context.settings, call.provider, call.model),
    )
