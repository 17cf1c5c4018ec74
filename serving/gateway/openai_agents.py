"""OpenAI chat completions for agents: any OpenAI client can talk to an agent.

``POST /v1/agents/{agent_id}/chat/completions``, or ``POST /v1/chat/completions`` with
``model: "agent:<agent_id>"``, runs one turn of the agent (its persona, tools and memory: the
turn is posted like ``POST /v1/conversations/{id}/messages``, ``agent_turns``) and answers in the
chat-completions shape, or as server-sent ``chat.completion.chunk`` events with ``stream: true``
(the model's words as they come, then ``[DONE]``). ``metadata.conversation_id`` continues a
conversation with the agent; without it each request starts one, and the answer names it
(``conversation_id``, and the ``X-Wonder-Conversation`` header). Same key, quotas and access
rules as the REST API. See docs/protocols.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse

from core.errors import Conflict, NotFound, RetryableError, Timeout, WonderError
from serving.gateway.agent_turns import (
    AgentSaid,
    Asker,
    Reconciler,
    StartedTurn,
    TokenDelta,
    ToolMove,
    TurnEnded,
    follow_turn,
    run_turn,
    start_turn,
)
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.errors import error_body
from serving.gateway.openai_protocol import (
    AGENT_MODEL_PREFIX,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    ChunkDelta,
    CompletionUsage,
    turn_input,
)

router = APIRouter(tags=["openai"])

ANSWER_TIMEOUT_S = 600.0
CONVERSATION_HEADER = "X-Wonder-Conversation"


@router.post(
    "/v1/agents/{agent_id}/chat/completions",
    response_model=ChatCompletion,
    summary="OpenAI chat completions answered by an agent (a turn: tools, memory and all)",
)
async def agent_chat_completions(
    agent_id: str,
    body: ChatCompletionRequest,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
) -> Response:
    asker = Asker(context, guard, client_id, user)
    return await _answer(asker, agent_id, body)


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    summary='OpenAI chat completions with model "agent:<agent id>"',
)
async def chat_completions(
    body: ChatCompletionRequest, context: Context, client_id: ClientId, guard: Guard, user: User
) -> Response:
    if not body.model.startswith(AGENT_MODEL_PREFIX) or len(body.model) == len(AGENT_MODEL_PREFIX):
        raise NotFound(
            f'model {body.model!r}: this route answers with agents (model "agent:<agent id>"); '
            "the local model's own OpenAI API is under the model's route prefix"
        )
    asker = Asker(context, guard, client_id, user)
    return await _answer(asker, body.model[len(AGENT_MODEL_PREFIX) :], body)


async def _answer(asker: Asker, agent_id: str, body: ChatCompletionRequest) -> Response:
    continuing = body.conversation_id is not None
    started = await start_turn(
        asker,
        agent_id,
        turn_input(body, continuing),
        body.conversation_id,
        title="chat completions",
    )
    model = f"{AGENT_MODEL_PREFIX}{agent_id}"
    headers = {CONVERSATION_HEADER: started.conversation.id}
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = _chunks(asker, started, model, include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    answer = await run_turn(asker.context, started, ANSWER_TIMEOUT_S)
    _raise_unless_completed(answer.ended)
    completion = ChatCompletion(
        id=_completion_id(started),
        created=int(time.time()),
        model=model,
        choices=[Choice(message=AssistantMessage(content=answer.text))],
        usage=_usage(answer.ended),
        conversation_id=started.conversation.id,
    )
    return Response(completion.model_dump_json(), media_type="application/json", headers=headers)


def _completion_id(started: StartedTurn) -> str:
    return f"chatcmpl-{started.accepted.turn_id}"


def _usage(ended: TurnEnded) -> CompletionUsage:
    prompt = int(ended.usage.get("prompt_tokens") or 0)
    completion = int(ended.usage.get("completion_tokens") or 0)
    return CompletionUsage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )


def _raise_unless_completed(ended: TurnEnded) -> None:
    """A failed turn as the answer's error: 409 when asking again cannot help (what the agent
    is made of: a missing model profile, a refusal), 503 when it may or the wait ran out."""
    if ended.status == "completed":
        return
    reason = ended.failure_reason or "unknown"
    if reason.startswith("no answer within"):
        raise Timeout(reason)
    if not ended.retriable:
        code = f" ({ended.failure_code})" if ended.failure_code else ""
        raise Conflict(f"the agent's turn failed{code}: {reason}")
    raise RetryableError(f"the agent's turn failed: {reason}")


@dataclass(frozen=True, slots=True)
class _ChunkWriter:
    """One ``chat.completion.chunk`` server-sent event of this answer."""

    chunk_id: str
    created: int
    model: str
    conversation_id: str

    def __call__(
        self, delta: ChunkDelta, finish: bool = False, usage: CompletionUsage | None = None
    ) -> str:
        choices = [ChunkChoice(delta=delta, finish_reason="stop" if finish else None)]
        body = ChatCompletionChunk(
            id=self.chunk_id,
            created=self.created,
            model=self.model,
            choices=choices if usage is None else [],
            usage=usage,
            conversation_id=self.conversation_id,
        )
        return f"data: {body.model_dump_json(exclude_none=True)}\n\n"


async def _chunks(
    asker: Asker, started: StartedTurn, model: str, include_usage: bool
) -> AsyncIterator[str]:
    chunk = _ChunkWriter(_completion_id(started), int(time.time()), model, started.conversation.id)
    yield chunk(ChunkDelta(role="assistant", content=""))
    reconciler = Reconciler()
    async for progress in follow_turn(asker.context, started, ANSWER_TIMEOUT_S):
        match progress:
            case TokenDelta(text=text):
                if text:
                    yield chunk(ChunkDelta(content=reconciler.token(text)))
            case AgentSaid(content=content):
                rest = reconciler.said(content)
                if rest:
                    yield chunk(ChunkDelta(content=rest))
            case ToolMove():
                reconciler.boundary()
            case TurnEnded() as ended:
                yield _ending(ended, chunk, include_usage)
    yield "data: [DONE]\n\n"


def _ending(ended: TurnEnded, chunk: _ChunkWriter, include_usage: bool) -> str:
    if ended.status != "completed":
        try:
            _raise_unless_completed(ended)
        except WonderError as exc:  # the stream has begun: the error is its last event
            return f"data: {json.dumps(error_body(exc))}\n\n"
    text = chunk(ChunkDelta(), True)
    if include_usage:
        text += chunk(ChunkDelta(), False, _usage(ended))
    return text
