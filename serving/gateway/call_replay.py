"""The playground: ``POST /v1/conversations/{id}/turns/{turn_id}/calls/{call_id}/replay`` sends a
recorded model call's request to another model profile's model and returns what it answered
(``core.call_replay``).

Nothing is written to the conversation (its log keeps its one writer): the answer goes back to
the caller only. The call is read as ``call_context.recorded_call`` reads it (another client's
ids are a 404); the profile is one the client sees (its own or the system's); the replay is
admitted as a turn is (the client's and the user's concurrent-turn and daily-token quotas, on
top of the request rate every route counts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from core.call_replay import ReplayRequest, ReplayResult, chat_request, folded, replay_body
from core.domain import ModelProfile, ToolError
from core.errors import Timeout, Unavailable, WonderError
from core.jsontypes import JsonObject
from core.llm.protocol import ChatChunk, ChatModel
from core.model_calls import ModelCallRecord
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.call_context import recorded_call
from serving.gateway.context import GatewayContext
from serving.gateway.quota_checks import admit_turn

router = APIRouter(prefix="/v1/conversations/{conversation_id}/turns/{turn_id}/calls")


def _chunks(model: ChatModel, body: JsonObject, profile: ModelProfile) -> AsyncIterator[ChatChunk]:
    """The body as it is where the model takes one (vLLM, OpenAI-compatible), else rebuilt."""
    stream_body = getattr(model, "stream_body", None)
    if callable(stream_body):
        chunks: AsyncIterator[ChatChunk] = stream_body(body, profile.timeout_s)
        return chunks
    return model.stream(chat_request(body, profile))


def _looked_up(
    context: GatewayContext, client_id: str, ids: tuple[str, str, str], body: ReplayRequest
) -> tuple[ModelCallRecord, ModelProfile]:
    call = recorded_call(context, client_id, *ids)
    profile = context.store.model_profiles.get(
        body.model_profile, body.version, client_id=client_id
    )
    return call, profile


@router.post(
    "/{call_id}/replay",
    response_model=ReplayResult,
    tags=["turns"],
    summary="Send a recorded model call's request to another model profile's model and return "
    "its answer (nothing is written to the conversation)",
)
async def replay_call(
    conversation_id: str,
    turn_id: str,
    call_id: str,
    body: ReplayRequest,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
) -> Any:
    ids = (conversation_id, turn_id, call_id)
    call, profile = await run_in_threadpool(_looked_up, context, client_id, ids, body)
    if call.request is None:
        raise Unavailable(f"the request of model call {call_id} is not available")
    await admit_turn(guard, client_id, user)
    if context.chat_models is None:
        raise Unavailable("this gateway cannot reach models")
    sent = replay_body(call.request, profile)
    started = time.monotonic()
    first: float | None = None
    received: list[ChatChunk] = []
    error: ToolError | None = None
    try:
        model = context.chat_models.for_profile(profile, client_id)
        async with asyncio.timeout(profile.timeout_s):
            async for chunk in _chunks(model, sent, profile):
                if first is None:
                    first = time.monotonic() - started
                received.append(chunk)
    except TimeoutError:
        error = ToolError.of(Timeout(f"model profile {profile.id} did not answer in time"))
    except WonderError as exc:
        error = ToolError.of(exc)
    response, usage = folded(received)
    return ReplayResult(
        call_id=call.id,
        model_profile_id=profile.id,
        model_profile_version=profile.version,
        provider=profile.provider,
        model=profile.model,
        request=sent,
        response=response,
        usage=usage,
        duration_s=round(time.monotonic() - started, 6),
        first_token_s=round(first, 6) if first is not None else None,
        status="error" if error else "ok",
        error=error,
        original=call.response,
        original_usage=call.usage,
    )
