"""Replaying a recorded model call with another model profile (the console's playground): what
is sent, and what came back. Pure: the gateway's shell streams the body and folds the chunks.

The recorded request is sent as it was (messages, tools, response format, sampling), addressed
to the profile's model; nothing of the replay is written to the conversation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from core.domain import Model, ModelProfile, ToolError, Usage, resolved_tool_calling
from core.jsontypes import JsonObject
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
)
from core.model_calls import ModelResponse, RecordedToolCall


class ReplayRequest(Model):
    """``POST .../calls/{call_id}/replay``."""

    model_profile: str = Field(min_length=1, max_length=64, description="The profile to ask")
    version: int | None = Field(None, ge=1, description="Its version (default: the latest)")


class ReplayResult(Model):
    call_id: str = Field(description="The recorded call replayed")
    model_profile_id: str
    model_profile_version: int
    provider: str
    model: str
    request: JsonObject = Field(description="The body sent")
    response: ModelResponse
    usage: Usage
    duration_s: float
    first_token_s: float | None = None
    status: str = Field(description="ok, or error (then error says why)")
    error: ToolError | None = None
    original: ModelResponse | None = Field(None, description="The recorded call's response")
    original_usage: Usage


def replay_body(recorded: JsonObject, profile: ModelProfile) -> JsonObject:
    """The recorded body addressed to ``profile``'s model (everything else as it was sent)."""
    return {**recorded, "model": profile.model, "stream": True}


def _tool_specs(tools: Any) -> list[ToolSpec]:
    specs = []
    for tool in tools if isinstance(tools, list) else []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            specs.append(
                ToolSpec(
                    fn["name"],
                    str(fn.get("description") or ""),
                    params if isinstance(params, dict) else {"type": "object"},
                )
            )
    return specs


def chat_request(body: JsonObject, profile: ModelProfile) -> ChatRequest:
    """``body`` as a provider-neutral request, for a model that takes no raw body (scripted)."""
    raw: Any = body.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    return ChatRequest(
        messages=messages,
        tools=_tool_specs(body.get("tools")),
        model=profile.model,
        temperature=profile.temperature,
        max_tokens=profile.max_tokens,
        timeout_s=profile.timeout_s,
        tool_calling=resolved_tool_calling(profile),
    )


def folded(chunks: Iterable[ChatChunk]) -> tuple[ModelResponse, Usage]:
    """The response the chunks make, and its usage."""
    text: list[str] = []
    calls: list[RecordedToolCall] = []
    finish: str | None = None
    usage = Usage()
    for chunk in chunks:
        if isinstance(chunk, TextDelta):
            text.append(chunk.text)
        elif isinstance(chunk, ToolCallRequested):
            calls.append(RecordedToolCall(id=chunk.id, name=chunk.name, arguments=chunk.arguments))
        elif isinstance(chunk, ModelFinished):
            finish = chunk.finish_reason
            usage = Usage(
                prompt_tokens=chunk.prompt_tokens, completion_tokens=chunk.completion_tokens
            )
    return ModelResponse(content="".join(text), tool_calls=calls, finish_reason=finish), usage
