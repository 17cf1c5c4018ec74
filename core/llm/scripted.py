"""``ScriptedModel``: a deterministic test double implementing ``ChatModel``.

A script is a list of steps; each call to ``stream`` consumes the next step (the last one repeats).
A step is a reply text, a list of tool calls, a ``Fail``, or a callable that computes one of those
from the request (pydantic-ai's ``FunctionModel`` idea). Reply texts may use placeholders filled
from the request: ``{{last_user}}``, ``{{last_tool}}`` (the latest tool result) and ``{{context}}``
(every system message), which lets a script answer from what context assembly gave it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.domain import ScriptStep
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
class Delay:
    """Wait, then play ``then`` (a slow model, for tests of concurrency and crashes)."""

    seconds: float
    then: str | list[Call] | Fail


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise a retryable infrastructure error for this step."""

    message: str = "scripted failure"


Step = str | list[Call] | Fail | Delay | Callable[[ChatRequest], "str | list[Call]"]


@dataclass
class ScriptedModel:
    steps: Sequence[Step] = ("ok",)
    requests: list[ChatRequest] = field(default_factory=list)

    @classmethod
    def from_profile_script(cls, script: Sequence[ScriptStep]) -> ScriptedModel:
        return cls([_from_stored(step) for step in script] or ["ok"])

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        index = min(len(self.requests), len(self.steps) - 1)
        self.requests.append(request)
        step = self.steps[index]
        if callable(step) and not isinstance(step, list | Fail | Delay):
            step = step(request)
        if isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = step.then
        if isinstance(step, Fail):
            raise RetryableError(step.message)
        if isinstance(step, str):
            text = fill_placeholders(step, request)
            for word in _words(text):
                yield TextDelta(word)
            yield ModelFinished(prompt_tokens=_count(request), completion_tokens=len(_words(text)))
            return
        for n, call in enumerate(step):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            yield ToolCallRequested(id=f"call_{len(self.requests)}_{n}", name=call.name, arguments=args)
        yield ModelFinished(prompt_tokens=_count(request), finish_reason="tool_calls")


def _from_stored(step: ScriptStep) -> Step:
    played: str | list[Call] | Fail
    if step.fail is not None:
        played = Fail(step.fail)
    elif step.tool_calls:
        played = [Call(c.name, c.arguments) for c in step.tool_calls]
    else:
        played = step.reply or ""
    return Delay(step.delay_s, played) if step.delay_s else played


def fill_placeholders(text: str, request: ChatRequest) -> str:
    if "{{" not in text:
        return text
    values = {
        "{{last_user}}": _last(request, "user"),
        "{{last_tool}}": _last(request, "tool"),
        "{{context}}": " ".join(
            str(m.get("content") or "") for m in request.messages if m.get("role") == "system"
        ),
    }
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _last(request: ChatRequest, role: str) -> str:
    for message in reversed(request.messages):
        if message.get("role") == role:
            return str(message.get("content") or "")
    return ""


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [p if i == len(parts) - 1 else p + " " for i, p in enumerate(parts)]


def _count(request: ChatRequest) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in request.messages)


def echo_last_user(request: ChatRequest) -> str:
    """A step that answers with the last user message (handy default for tests)."""
    return f"echo: {_last(request, 'user')}"
