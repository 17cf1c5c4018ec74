"""Recording model calls where they are made: the exact body sent, the response as it came back.

Every provider streams a chat-completions body through one function, ``recorded_body``: the
constrained tool-calling protocol calls it once per body it sends (``choose``, then ``fill`` or
``reply``), a native call once, a tool's shortcut never (no body is sent). It yields the backend's
chunks unchanged and, when the call ends (answered, failed or abandoned), hands a
``ModelCallRecord`` to this process's call sinks (``add_call_sink``: the store's background
writer, the metrics) and closes the call's ``chat {model}`` span. The W3C context of that span is
current while the backend runs, so the backend sends it on (``core.tracing.current_traceparent``)
and the model replica's own span joins the turn's trace.

What made the call (a turn's loop step, a hook task, a workflow node) is the ``CallScope`` the
caller sets around it (``scoped``); the provider's profile gives the model, the provider name and
the prices the cost is estimated from. Nothing here blocks: records are queued, written
elsewhere. With no sink and no span exporter, a call costs a clock read per chunk.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from core import tracing
from core.domain import ModelProfile, ToolError, Usage
from core.errors import ErrorCode, WonderError
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.llm.protocol import ChatChunk, ModelFinished, TextDelta, ToolCallRequested
from core.model_calls import (
    CallPurpose,
    CallSource,
    CallTimings,
    LinkKind,
    ModelCallRecord,
    ModelResponse,
    RecordedToolCall,
    ServedBy,
    TurnLink,
)
from core.tracing import Span, SpanKind

log = logging.getLogger("wonder.recording")

BodySender = Callable[[JsonObject, float], AsyncIterator[ChatChunk]]


@dataclass(frozen=True, slots=True)
class CallScope:
    """What the model calls made inside ``scoped`` are for."""

    source: CallSource = field(default_factory=CallSource)
    profile: ModelProfile | None = None
    attempt: int = 1
    purpose: CallPurpose | None = None  # what every call in the scope is (a task's ``llm``)


class CallSink(Protocol):
    """Where finished call records go; ``model_call`` must not block."""

    def model_call(self, record: ModelCallRecord) -> None: ...


class LinkSink(Protocol):
    """Where turn links go; ``turn_link`` must not block."""

    def turn_link(self, link: TurnLink) -> None: ...


_scope: ContextVar[CallScope | None] = ContextVar("wonder_call_scope", default=None)
_SINKS: list[CallSink] = []
_LINK_SINKS: list[LinkSink] = []


def add_call_sink(sink: CallSink) -> None:
    if sink not in _SINKS:
        _SINKS.append(sink)


def remove_call_sink(sink: CallSink) -> None:
    if sink in _SINKS:
        _SINKS.remove(sink)


def add_link_sink(sink: LinkSink) -> None:
    if sink not in _LINK_SINKS:
        _LINK_SINKS.append(sink)


def remove_link_sink(sink: LinkSink) -> None:
    if sink in _LINK_SINKS:
        _LINK_SINKS.remove(sink)


def link_turn(
    turn_id: str | None,
    kind: LinkKind,
    target_id: str,
    conversation_id: str | None = None,
    **data: Any,
) -> None:
    """Record that ``turn_id`` caused (or used) ``target_id`` (no turn: nothing to record)."""
    if turn_id is None or not _LINK_SINKS:
        return
    link = TurnLink(
        turn_id=turn_id,
        kind=kind,
        target_id=target_id,
        conversation_id=conversation_id,
        at=utc_now(),
        data=data,
    )
    for sink in _LINK_SINKS:
        try:
            sink.turn_link(link)
        except Exception:  # a link is observability: it never fails what it observed
            log.exception("could not record a turn link")


def recording() -> bool:
    """Whether this process records model calls anywhere."""
    return bool(_SINKS)


def current_scope() -> CallScope | None:
    return _scope.get()


@contextmanager
def scoped(scope: CallScope) -> Iterator[CallScope]:
    """Model calls made in the block (in this task) are recorded as ``scope``'s."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


@contextmanager
def attempt(number: int) -> Iterator[None]:
    """Calls made in the block are the ``number``-th attempt of the current scope's call."""
    scope = _scope.get()
    if scope is None:
        yield
        return
    token = _scope.set(replace(scope, attempt=number))
    try:
        yield
    finally:
        _scope.reset(token)


@dataclass
class _Observed:
    """What came back so far."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCallRequested] = field(default_factory=list)
    finished: ModelFinished | None = None
    first_chunk_s: float | None = None
    error: BaseException | None = None


async def recorded_body(
    send: BodySender,
    body: JsonObject,
    timeout_s: float,
    purpose: CallPurpose,
    provider: str,
    sent: JsonObject | None = None,
) -> AsyncIterator[ChatChunk]:
    """``send(body, timeout_s)``'s chunks, with the call recorded and traced (module doc).

    ``sent``: the body as the model receives it, when the backend changes ``body`` on the way
    (routing keys taken out, the served model's name put in); that is what is recorded."""
    scope = _scope.get() or CallScope()
    purpose = scope.purpose or purpose
    inner = send(body, timeout_s)
    body = sent if sent is not None else body
    model = str(body.get("model") or (scope.profile.model if scope.profile else ""))
    provider = scope.profile.provider if scope.profile is not None else provider
    chat = _chat_span(scope, body, model, provider, purpose)
    started_at = utc_now()
    t0 = time.perf_counter()
    seen = _Observed()
    try:
        while True:
            with tracing.attached(chat.context()):  # the backend sends it on
                try:
                    chunk = await anext(inner)
                except StopAsyncIteration:
                    break
            match chunk:
                case TextDelta(text=text):
                    seen.text.append(text)
                case ToolCallRequested():
                    seen.calls.append(chunk)
                case ModelFinished():
                    seen.finished = chunk
            if seen.first_chunk_s is None and not isinstance(chunk, ModelFinished):
                seen.first_chunk_s = time.perf_counter() - t0
            yield chunk
    except BaseException as exc:
        seen.error = exc
        raise
    finally:
        duration = time.perf_counter() - t0
        if isinstance(inner, AsyncGenerator):
            await inner.aclose()
        try:
            _finish(scope, body, model, provider, purpose, chat, seen, started_at, duration)
        except Exception:  # recording must never fail the call it observed
            log.exception("could not record a model call")


def _chat_span(
    scope: CallScope, body: JsonObject, model: str, provider: str, purpose: CallPurpose
) -> Span:
    source = scope.source
    chat = tracing.start_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        conversation_id=source.conversation_id,
        turn_id=source.turn_id,
    )
    output = "json" if body.get("response_format") or body.get("tool_choice") else "text"
    chat.update(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.stream": bool(body.get("stream", True)),
            "gen_ai.request.temperature": _number(body.get("temperature")),
            "gen_ai.request.max_tokens": _integer(body.get("max_tokens")),
            "gen_ai.conversation.id": source.conversation_id,
            "gen_ai.agent.id": source.agent_id,
            "gen_ai.output.type": output,
            "wonder.call.purpose": purpose,
            "wonder.call.attempt": scope.attempt,
            "wonder.turn.id": source.turn_id,
            "wonder.workflow.run_id": source.run_id,
            "wonder.hook": source.hook,
        }
    )
    if tracing.capture_content():
        messages = body.get("messages")
        if isinstance(messages, list):
            chat.set("gen_ai.input.messages", tracing.clipped(json.dumps(input_parts(messages))))
    return chat


def _finish(
    scope: CallScope,
    body: JsonObject,
    model: str,
    provider: str,
    purpose: CallPurpose,
    chat: Span,
    seen: _Observed,
    started_at: Any,
    duration_s: float,
) -> None:
    finished = seen.finished or ModelFinished(finish_reason="")
    first = finished.first_chunk_s if finished.first_chunk_s is not None else seen.first_chunk_s
    decode = _decode_rate(finished.completion_tokens, first, duration_s)
    served = served_by(provider, finished)
    error = _call_error(seen.error) if seen.error is not None or seen.finished is None else None
    response = ModelResponse(
        content="".join(seen.text),
        tool_calls=[
            RecordedToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in seen.calls
        ],
        finish_reason=finished.finish_reason or None,
    )
    _end_chat(chat, finished, first, decode, served, error, response)
    if not _SINKS:
        return
    usage = Usage(
        prompt_tokens=finished.prompt_tokens, completion_tokens=finished.completion_tokens
    )
    prices = scope.profile.prices if scope.profile is not None else None
    record = ModelCallRecord(
        id=new_id("call"),
        source=scope.source,
        purpose=purpose,
        attempt=scope.attempt,
        profile_id=scope.profile.id if scope.profile is not None else None,
        provider=provider,
        model=model,
        served_by=served,
        request=body,
        response=response,
        usage=usage,
        cost=prices.cost(usage.prompt_tokens, usage.completion_tokens) if prices else None,
        currency=prices.currency if prices else None,
        status="error" if error is not None else "ok",
        error=error,
        timings=CallTimings(
            started_at=started_at,
            duration_s=round(duration_s, 6),
            first_token_s=None if first is None else round(first, 6),
            decode_tokens_per_s=decode,
        ),
        trace_id=chat.trace_id,
        span_id=chat.span_id,
        created_at=started_at,
    )
    for sink in _SINKS:
        try:
            sink.model_call(record)
        except Exception:
            log.exception("call sink %s failed", type(sink).__name__)


def _end_chat(
    chat: Span,
    finished: ModelFinished,
    first: float | None,
    decode: float | None,
    served: ServedBy | None,
    error: ToolError | None,
    response: ModelResponse,
) -> None:
    chat.update(
        {
            "gen_ai.response.id": finished.response_id,
            "gen_ai.response.model": finished.response_model,
            "gen_ai.response.finish_reasons": [finished.finish_reason]
            if finished.finish_reason
            else None,
            "gen_ai.usage.input_tokens": finished.prompt_tokens,
            "gen_ai.usage.output_tokens": finished.completion_tokens,
            "gen_ai.response.time_to_first_chunk": None if first is None else round(first, 6),
            "wonder.decode_tokens_per_s": decode,
            "wonder.deployment": served.deployment if served else None,
            "wonder.replica": served.replica if served else None,
            "server.address": served.host if served else None,
        }
    )
    if tracing.capture_content():
        chat.set("gen_ai.output.messages", tracing.clipped(json.dumps(output_parts(response))))
    if error is not None:
        chat.fail(str(error.code), error.message)
    replica_span = (finished.served_by or {}).get("span")
    if isinstance(replica_span, dict):
        tracing.record_remote(replica_span)
    chat.end()


def served_by(provider: str, finished: ModelFinished) -> ServedBy | None:
    """Who served the call, from what the backend reported (the replica's own words)."""
    reported = finished.served_by or {}
    if not reported and finished.response_id is None and finished.response_model is None:
        return None
    return ServedBy(
        provider=provider,
        deployment=_text(reported.get("deployment")),
        replica=_text(reported.get("replica")),
        host=_text(reported.get("host")),
        response_model=finished.response_model,
        response_id=finished.response_id,
    )


def _call_error(exc: BaseException | None) -> ToolError:
    if isinstance(exc, WonderError):
        return ToolError.of(exc)
    if exc is None:
        message = "the response ended without a finish"
    elif isinstance(exc, GeneratorExit):
        message = "abandoned by the caller"
    else:
        message = f"{type(exc).__name__}: {exc}"[:500]
    return ToolError(code=ErrorCode.EXECUTION_FAILED, message=message, retriable=True)


def _decode_rate(tokens: int, first_s: float | None, duration_s: float) -> float | None:
    if first_s is None or tokens < 2 or duration_s - first_s <= 0:
        return None
    return round((tokens - 1) / (duration_s - first_s), 2)


def input_parts(messages: list[Any]) -> list[JsonObject]:
    """OpenAI chat messages in the GenAI conventions' ``gen_ai.input.messages`` shape."""
    out: list[JsonObject] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        parts: list[JsonObject] = []
        content = message.get("content")
        if content:
            parts.append(
                {
                    "type": "text",
                    "content": content if isinstance(content, str) else json.dumps(content),
                }
            )
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                }
            )
        out.append({"role": message.get("role"), "parts": parts})
    return out


def output_parts(response: ModelResponse) -> list[JsonObject]:
    parts: list[JsonObject] = []
    if response.content:
        parts.append({"type": "text", "content": response.content})
    for call in response.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return [{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason}]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value)[:200] if value else None
