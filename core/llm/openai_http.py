"""A ``ChatModel`` for any OpenAI-compatible HTTP endpoint (hosted models, or vLLM's server).

Streams ``/chat/completions`` with server-sent events. Tool calls use the endpoint's native
``tools``/``tool_choice="auto"``; the constrained mode for small local models lives in
``core.llm.constrained`` and is layered on top of a ``CompletionBackend`` such as this one.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from core.errors import InvalidInput, RetryableError, Timeout
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)

JsonObject = dict[str, Any]


@dataclass
class OpenAIHttpModel:
    """Streams chat completions from ``base_url`` (e.g. ``http://127.0.0.1:8000/llm/v1``)."""

    base_url: str
    api_key: str | None = None

    @classmethod
    def from_env(cls, base_url: str, api_key_env: str | None) -> OpenAIHttpModel:
        return cls(base_url=base_url, api_key=os.environ.get(api_key_env) if api_key_env else None)

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        body: JsonObject = {
            "model": request.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [t.to_openai() for t in request.tools]
            body["tool_choice"] = "auto"
        return self.stream_body(body, request.timeout_s)

    async def stream_body(self, body: JsonObject, timeout_s: float) -> AsyncIterator[ChatChunk]:
        """Stream any chat-completions body and translate it into chunks."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.base_url.rstrip("/") + "/chat/completions"
        calls: dict[int, dict[str, str]] = {}
        finished = ModelFinished()
        try:
            async with (
                httpx.AsyncClient(timeout=timeout_s) as client,
                client.stream("POST", url, json=body, headers=headers) as response,
            ):
                await _raise_for_status(response)
                async for data in _sse_data(response):
                    for chunk in _translate(data, calls):
                        if isinstance(chunk, ModelFinished):
                            finished = _merge_finish(finished, chunk)
                        else:
                            yield chunk
        except httpx.TimeoutException as exc:
            raise Timeout(f"model endpoint timed out: {exc}") from exc
        except httpx.TransportError as exc:
            raise RetryableError(f"model endpoint unreachable: {exc}") from exc
        for index in sorted(calls):
            call = calls[index]
            yield ToolCallRequested(id=call["id"], name=call["name"], arguments=call["arguments"])
        yield finished


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


def _translate(data: JsonObject, calls: dict[int, dict[str, str]]) -> list[ChatChunk]:
    out: list[ChatChunk] = []
    usage = data.get("usage") or {}
    finish_reason: str | None = None
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            out.append(TextDelta(delta["content"]))
        for call in delta.get("tool_calls") or []:
            slot = calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
            fn = call.get("function") or {}
            slot["id"] = call.get("id") or slot["id"]
            slot["name"] += fn.get("name") or ""
            slot["arguments"] += fn.get("arguments") or ""
        finish_reason = choice.get("finish_reason") or finish_reason
    if usage or finish_reason:
        out.append(
            ModelFinished(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                finish_reason=finish_reason or "",
            )
        )
    return out


def _merge_finish(old: ModelFinished, new: ModelFinished) -> ModelFinished:
    return ModelFinished(
        prompt_tokens=new.prompt_tokens or old.prompt_tokens,
        completion_tokens=new.completion_tokens or old.completion_tokens,
        finish_reason=new.finish_reason or old.finish_reason,
    )
