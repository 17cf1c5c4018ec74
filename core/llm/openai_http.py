"""A ``ChatModel`` for any OpenAI-compatible HTTP endpoint (hosted models, or vLLM's server).

Streams ``/chat/completions`` with server-sent events. ``request.tool_calling`` picks how tools are
offered: ``native`` sends them with ``tool_choice="auto"``; ``constrained`` (for small local models)
runs the two-step protocol of ``core.llm.constrained`` on top of ``stream_body``. The stream
translation (``StreamTranslator``) is shared with the Serve-handle backend.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from core.errors import InvalidInput, RetryableError, Timeout, WonderError
from core.jsontypes import JsonObject
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)


@dataclass
class OpenAIHttpModel:
    """Streams chat completions from ``base_url`` (e.g. ``http://127.0.0.1:8000/llm/v1``)."""

    base_url: str
    api_key: str | None = None

    @classmethod
    def from_env(cls, base_url: str, api_key_env: str | None) -> OpenAIHttpModel:
        return cls(base_url=base_url, api_key=os.environ.get(api_key_env) if api_key_env else None)

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        from core.llm.constrained import stream_chat

        return stream_chat(self, request)

    async def stream_body(self, body: JsonObject, timeout_s: float) -> AsyncIterator[ChatChunk]:
        """Stream any chat-completions body and translate it into chunks."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if body.get("prompt_cache_key"):  # Ray Serve routes a session to one replica by this
            headers["x-session-id"] = str(body["prompt_cache_key"])
        url = self.base_url.rstrip("/") + "/chat/completions"
        translator = StreamTranslator()
        try:
            async with (
                httpx.AsyncClient(timeout=timeout_s) as client,
                client.stream("POST", url, json=body, headers=headers) as response,
            ):
                await _raise_for_status(response)
                async for data in _sse_data(response):
                    for chunk in translator.feed(data):
                        yield chunk
        except httpx.TimeoutException as exc:
            raise Timeout(f"model endpoint timed out: {exc}") from exc
        except httpx.TransportError as exc:
            raise RetryableError(f"model endpoint unreachable: {exc}") from exc
        for chunk in translator.finish():
            yield chunk


@dataclass
class StreamTranslator:
    """Turns chat-completion stream payloads (parsed ``data:`` lines) into ``ChatChunk``s.

    Text deltas come out as they arrive; tool-call fragments are assembled and come out of
    ``finish()`` with the usage, after the stream ends.
    """

    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finished: ModelFinished = field(default_factory=ModelFinished)

    def feed(self, data: JsonObject) -> list[ChatChunk]:
        if data.get("error"):
            raise error_from_payload(data["error"])
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
        out.append(self.finished)
        return out

    def _add_call_fragment(self, call: JsonObject) -> None:
        slot = self.calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
        fn = call.get("function") or {}
        slot["id"] = call.get("id") or slot["id"]
        slot["name"] += fn.get("name") or ""
        arguments = fn.get("arguments") or ""
        slot["arguments"] += arguments if isinstance(arguments, str) else json.dumps(arguments)


def error_from_payload(error: JsonObject | str) -> WonderError:
    """An OpenAI-style ``{"error": {...}}`` payload as the error it means for retries."""
    if isinstance(error, str):
        return RetryableError(f"model endpoint error: {error}")
    code = error.get("code")
    message = str(error.get("message") or error)[:500]
    if isinstance(code, int) and 400 <= code < 500 and code not in (408, 429):
        return InvalidInput(f"model endpoint rejected the request ({code}): {message}")
    return RetryableError(f"model endpoint error ({code}): {message}")


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    text = (await response.aread()).decode(errors="replace")[:500]
    if response.status_code in (408, 429) or response.status_code >= 500:
        raise RetryableError(f"model endpoint returned {response.status_code}: {text}")
    raise InvalidInput(f"model endpoint rejected the request ({response.status_code}): {text}")


async def _sse_data(response: httpx.Response) -> AsyncIterator[JsonObject]:
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)
