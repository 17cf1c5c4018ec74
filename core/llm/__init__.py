"""LLM access behind one protocol: ``ChatModel.stream(request)`` yields deltas and tool calls."""

from core.llm.protocol import (
    ChatChunk,
    ChatModel,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
)

__all__ = [
    "ChatChunk",
    "ChatModel",
    "ChatRequest",
    "ModelFinished",
    "TextDelta",
    "ToolCallRequested",
    "ToolSpec",
]
