"""A recorded model call's context window: ``GET /v1/conversations/{id}/turns/{turn_id}/calls/
{call_id}/context`` (``core.context_window``), read-only.

The call is found among the turn's records, read as ``calls.list_calls`` reads them: through a
conversation the client may read (its own turns or a fork's inherited ones); any other id is a 404.
A call the local deployment served is counted by that deployment's chat template and tokenizer
(``PromptTokenizers``); any other call, or one the deployment cannot count now, is estimated, and
the answer says why.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from core.context_window import ContextWindow, PromptCounts, context_window, prompt_probes
from core.errors import InvalidInput, NotFound, WonderError
from core.jsontypes import JsonObject
from core.model_calls import ModelCallRecord
from core.record_sink import load_bodies
from core.settings import Settings
from serving.gateway.auth import ClientId, Context
from serving.gateway.calls import MAX_CALLS, _objects, readable_turn
from serving.gateway.context import GatewayContext
from serving.llm_config import model_plans

router = APIRouter(prefix="/v1/conversations/{conversation_id}/turns/{turn_id}/calls")

MAX_PROBES = 64
"""Prompts one count may ask the deployment for (two per section change of the request, about):
a request split into more parts is estimated instead."""


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
    "each with its tokens (counted by the local model's tokenizer, else estimated), against the "
    "model's window",
)
def call_context(
    conversation_id: str, turn_id: str, call_id: str, context: Context, client_id: ClientId
) -> Any:
    call = recorded_call(context, client_id, conversation_id, turn_id, call_id)
    if call.request is None:
        raise NotFound(f"the request of model call {call_id} is not available")
    counted, note = counted_prompt(context, call, call.request)
    return context_window(
        call.id,
        call.provider,
        call.model,
        call.request,
        call.usage.prompt_tokens if call.status == "ok" else None,
        served_window(context.settings, call.provider, call.model),
        counted,
        note,
    )


def counted_prompt(
    context: GatewayContext, call: ModelCallRecord, request: JsonObject
) -> tuple[PromptCounts | None, str | None]:
    """The local deployment's counts of the call's ``request``, or why there are none."""
    if call.provider != "vllm":
        return None, f"a {call.provider} model served the call: only the local model is counted"
    if context.tokenizers is None:
        return None, "this gateway has no local model deployment to count with"
    probes = prompt_probes(request)
    if not probes:
        return None, "the request has no messages"
    if len(probes) > MAX_PROBES:
        return None, f"the request has too many parts to count ({len(probes)} prompts)"
    deployment = call.served_by.deployment if call.served_by is not None else None
    try:
        return context.tokenizers.count(deployment, call.model, probes), None
    except WonderError as exc:
        return None, exc.message
