"""The chat-model protocol every provider implements (OpenAI chat-completions shape).

A provider turns a ``ChatRequest`` into a stream of chunks: ``TextDelta`` as tokens arrive, then
zero or more ``ToolCallRequested``, then exactly one ``ModelFinished`` with usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from core.jsontypes import JsonObject


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: JsonObject
    shortcut: str | None = None
    """The tool's shortcut pattern (``core.tool_shortcuts``); never sent to a model."""

    def to_openai(self) -> JsonObject:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """An OpenAI chat-completions request, provider-neutral."""

    messages: list[JsonObject]
    tools: list[ToolSpec] = field(default_factory=list)
    model: str = "default"
    temperature: float = 0.0
    max_tokens: int = 256
    timeout_s: float = 120.0
    tool_calling: Literal["native", "constrained"] = "constrained"
    reasoning: JsonObject = field(default_factory=dict)
    """Request fields that ask the model to think (``core.model_override.thinking_body``)."""
    cache_key: str | None = None
    """Keeps related calls (one conversation's) on one model replica, whose prefix cache holds
    their shared prompt; sent as OpenAI's ``prompt_cache_key``. None: the local model derives a
    key from the first user message."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallRequested:
    id: str
    name: str
    arguments: str  # JSON text as the model produced it; validated by the loop


@dataclass(frozen=True, slots=True)
class ModelFinished:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    # What the call was, not what it answered: left out of comparisons.
    response_id: str | None = field(default=None, compare=False)
    response_model: str | None = field(default=None, compare=False)
    first_chunk_s: float | None = field(default=None, compare=False)
    """Request sent → first chunk of the response received (the backend's own clock)."""
    served_by: JsonObject | None = field(default=None, compare=False)
    """What the serving replica said about itself (the local deployment: ``core.llm.recording``)."""


ChatChunk = TextDelta | ToolCallRequested | ModelFinished


@runtime_checkable
class ChatModel(Protocol):
    """Anything that streams a chat completion."""

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Yield the completion as chunks; raise ``RetryableError`` for infrastructure failures."""
        ...


async def complete(model: ChatModel, request: ChatRequest) -> str:
    """The model's whole text reply (tool calls are not offered to such calls)."""
    parts: list[str] = []
    async for chunk in model.stream(request):
        if isinstance(chunk, TextDelta):
            parts.append(chunk.text)
    return "".join(parts)
