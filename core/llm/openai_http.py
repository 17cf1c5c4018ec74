"""A ``ChatModel`` for any OpenAI-compatible HTTP endpoint (hosted models, or vLLM's server).

Streams ``/chat/completions`` with server-sent events. ``request.tool_calling`` picks how tools are
offered: ``native`` sends them with ``tool_choice="auto"``; ``constrained`` (for small local models)
runs the two-step protocol of ``core.llm.constrained`` on top of ``stream_body``. The stream
translation (``StreamTranslator``) is shared with the Serve-handle backend.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from core.egress import EgressPolicy, checked
from core.errors import InvalidInput, RetryableError, Timeout, WonderError
from core.jsontypes import JsonObject
from core.llm.constrained import stream_chat
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)
from core.tracing import current_traceparent

ApiKey = Callable[[], Awaitable[str | None]]
"""Resolves the API key at the moment of the call (a secret's value, or None for no key)."""


async def no_key() -> str | None:
    return None


@dataclass
class OpenAIHttpModel:
    """Streams chat completions from ``base_url`` (e.g. ``http://127.0.0.1:8000/llm/v1``).

    Before each call the URL is checked against ``egress`` (the operator's allow-list), its host
    resolved and the address checked, and the request sent to that address (``core.egress``);
    only then is the API key resolved (``api_key``) and sent. Redirects are not followed. A
    provider's error body is never repeated: errors say the status and a short, safe summary.
    """

    base_url: str
    egress: EgressPolicy
    api_key: ApiKey = no_key
    provider: str = "openai"

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return stream_chat(self, request)

    def sent_body(self, body: JsonObject) -> JsonObject:
        return body

    async def stream_body(self, body: JsonObject, timeout_s: float) -> AsyncIterator[ChatChunk]:
        """Stream any chat-completions body and translate it into chunks."""
        url = self.base_url.rstrip("/") + "/chat/completions"
        pinned = await checked(url, self.egress, "model profile base_url")
        headers = pinned.headers()
        key = await self.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if body.get("prompt_cache_key"):  # Ray Serve routes a session to one replica by this
            headers["x-session-id"] = str(body["prompt_cache_key"])
        traceparent = current_traceparent()
        if traceparent:  # the provider's own spans (if it traces) join the turn's trace
            headers["traceparent"] = traceparent
        model = str(body.get("model") or "")
        translator = StreamTranslator(model=model, host=urlsplit(self.base_url).hostname)
        try:
            async with (
                httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client,
                client.stream(
                    "POST",
                    pinned.url(),
                    json=body,
                    headers=headers,
                    extensions=pinned.extensions(),
                ) as response,
            ):
                raise_for_status(response, model)
                async for data in _sse_data(response):
                    for chunk in translator.feed(data):
                        yield chunk
        except httpx.TimeoutException:
            raise Timeout("model endpoint timed out") from None
        except httpx.TransportError as exc:
            raise RetryableError(f"model endpoint unreachable ({type(exc).__name__})") from None
        for chunk in translator.finish():
            yield chunk


@dataclass
class StreamTranslator:
    """Turns chat-completion stream payloads (parsed ``data:`` lines) into ``ChatChunk``s.

    Text deltas come out as they arrive; tool-call fragments are assembled and come out of
    ``finish()`` with the usage, after the stream ends.
    """

    model: str = ""  # the model asked for, named in a rejection (ours, not the provider's text)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finished: ModelFinished = field(default_factory=ModelFinished)
    host: str | None = None
    """The provider's host (recorded as who served the call)."""
    started: float = field(default_factory=time.perf_counter)
    first_chunk_s: float | None = None
    response_id: str | None = None
    response_model: str | None = None
    served_by: JsonObject | None = None

    def feed(self, data: JsonObject) -> list[ChatChunk]:
        if data.get("error"):
            raise error_from_payload(data["error"], self.model)
        if self.first_chunk_s is None:
            self.first_chunk_s = time.perf_counter() - self.started
        if isinstance(data.get("wonder"), dict):  # the local replica's own report (serving.llm)
            self.served_by = data["wonder"]
            return []
        self.response_id = self.response_id or _short(data.get("id"))
        self.response_model = self.response_model or _short(data.get("model"))
        out: list[ChatChunk] = []
        usage = data.get("usage") or {}
        finish_reason: str | None = None
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            if delta.get("content"):
                out.append(TextDelta(delta["content"]))
            for call in delta.get("tool_calls") or []:
                self._add_call_fragment(call)
            finish_reason = choice.get("finish_reason") or finish_reason
        if usage or finish_reason:
            self.finished = ModelFinished(
                prompt_tokens=int(usage.get("prompt_tokens") or self.finished.prompt_tokens),
                completion_tokens=int(
                    usage.get("completion_tokens") or self.finished.completion_tokens
                ),
                finish_reason=finish_reason or self.finished.finish_reason,
            )
        return out

    def finish(self) -> list[ChatChunk]:
        out: list[ChatChunk] = [
            ToolCallRequested(id=c["id"], name=c["name"], arguments=c["arguments"])
            for _, c in sorted(self.calls.items())
        ]
        served = self.served_by
        if self.host is not None:
            served = {**(served or {}), "host": self.host}
        out.append(
            replace(
                self.finished,
                response_id=self.response_id,
                response_model=self.response_model,
                first_chunk_s=self.first_chunk_s,
                served_by=served,
            )
        )
        return out

    def _add_call_fragment(self, call: JsonObject) -> None:
        slot = self.calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
        fn = call.get("function") or {}
        slot["id"] = call.get("id") or slot["id"]
        slot["name"] += fn.get("name") or ""
        arguments = fn.get("arguments") or ""
        slot["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments)


def _short(value: object) -> str | None:
    return str(value)[:200] if isinstance(value, str) and value else None


SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SAFE_REASON = re.compile(r"^[A-Za-z -]{1,40}$")


def error_from_payload(error: JsonObject | str, model: str = "") -> WonderError:
    """An OpenAI-style ``{"error": {...}}`` payload as the error it means for retries. Only its
    numeric code and a short identifier (``type``/``code``, when it is one) are kept, beside the
    model the request named: the provider's text never reaches a turn's events."""
    if isinstance(error, str):
        return RetryableError("model endpoint error")
    code = error.get("code")
    kind = _safe_kind(error)
    if isinstance(code, int) and 400 <= code < 500 and code not in (408, 429):
        return InvalidInput(f"model endpoint rejected the request{_for(model)} ({code}{kind})")
    number = code if isinstance(code, int) else "stream"
    return RetryableError(f"model endpoint error ({number}{kind})")


def _safe_kind(error: JsonObject) -> str:
    for field_name in ("type", "code"):
        value = error.get(field_name)
        if isinstance(value, str) and SAFE_TOKEN.match(value):
            return f", {value}"
    return ""


def _for(model: str) -> str:
    shown = _short(model)
    return f" for model {shown!r}" if shown else ""


def raise_for_status(response: httpx.Response, model: str = "") -> None:
    """A status of 400 or more as an error naming the status and the model asked for only (the
    body is not read)."""
    status = response.status_code
    if status < 400:
        return
    reason = response.reason_phrase if SAFE_REASON.match(response.reason_phrase) else ""
    summary = f"{status} {reason}".strip()
    if status in (408, 429) or status >= 500:
        raise RetryableError(f"model endpoint returned {summary}")
    raise InvalidInput(f"model endpoint rejected the request{_for(model)} ({summary})")


async def _sse_data(response: httpx.Response) -> AsyncIterator[JsonObject]:
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)
