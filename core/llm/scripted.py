"""``ScriptedModel``: a deterministic test double implementing ``ChatModel``.

A script is a list of steps; each call to ``stream`` consumes the next step (the last one repeats).
A step is either a reply text or a list of tool calls, or a callable that computes one of those
from the request (pydantic-ai's ``FunctionModel`` idea), which lets tests answer from the context.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import RetryableError
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call in a script."""

    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise a retryable infrastructure error for this step."""

    message: str = "scripted failure"


Step = str | list[Call] | Fail | Callable[[ChatRequest], "str | list[Call]"]


@dataclass
class ScriptedModel:
    steps: Sequence[Step] = ("ok",)
    requests: list[ChatRequest] = field(default_factory=list)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        index = min(len(self.requests), len(self.steps) - 1)
        self.requests.append(request)
        step = self.steps[index]
        if callable(step) and not isinstance(step, list | Fail):
            step = step(request)
        if isinstance(step, Fail):
            raise RetryableError(step.message)
        if isinstance(step, str):
            for word in _words(step):
                yield TextDelta(word)
            yield ModelFinished(prompt_tokens=_count(request), completion_tokens=len(_words(step)))
            return
        for n, call in enumerate(step):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            yield ToolCallRequested(id=f"call_{len(self.requests)}_{n}", name=call.name, arguments=args)
        yield ModelFinished(prompt_tokens=_count(request), finish_reason="tool_calls")


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [p if i == len(parts) - 1 else p + " " for i, p in enumerate(parts) if p or i == 0]


def _count(request: ChatRequest) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in request.messages)


def echo_last_user(request: ChatRequest) -> str:
    """A step that answers with the last user message (handy default for tests)."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return f"echo: {message.get('content')}"
    return "echo: nothing"
