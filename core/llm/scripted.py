"""``ScriptedModel``: a deterministic test double implementing ``ChatModel``.

A script is a list of steps; each call to ``stream`` consumes the next step (the last one repeats).
A step is a reply text, a list of tool calls, a ``Fail``, or a callable that computes one of those
from the request (pydantic-ai's ``FunctionModel`` idea). Reply texts may use placeholders filled
from the request: ``{{last_user}}``, ``{{last_tool}}`` (the latest tool result), ``{{context}}``
(every system message) and ``{{history}}`` (the user/assistant messages), which lets a
script answer from what context assembly gave it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.domain import ScriptStep
from core.errors import RetryableError
from core.llm.constrained import native_body
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)
from core.llm.recording import recorded_body


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
class Match:
    """Play ``then`` when the request's last message contains ``pattern`` (rule-style scripts)."""

    pattern: str
    then: Step


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise a retryable infrastructure error for this step."""

    message: str = "scripted failure"


Step = str | list[Call] | Fail | Delay | Match | Callable[[ChatRequest], "str | list[Call]"]


@dataclass
class ScriptedModel:
    steps: Sequence[Step] = ("ok",)
    requests: list[ChatRequest] = field(default_factory=list)

    @classmethod
    def from_profile_script(cls, script: Sequence[ScriptStep]) -> ScriptedModel:
        return cls([_from_stored(step) for step in script] or ["ok"])

    def _select(self, request: ChatRequest) -> Step:
        """Rule-style scripts pick the first step matching the last message; others go in order."""
        rules = [s for s in self.steps if isinstance(s, Match)]
        if rules:
            last = str(request.messages[-1].get("content") or "") if request.messages else ""
            for rule in rules:
                if rule.pattern in last:
                    return rule.then
            return "ok"
        return self.steps[min(len(self.requests), len(self.steps) - 1)]

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The next step's chunks; the call is recorded like any model's (``core.llm.recording``),
        its body the request as an OpenAI-compatible provider would have been sent it."""
        return recorded_body(
            lambda _body, _timeout: self._play(request),
            native_body(request),
            request.timeout_s,
            "answer",
            "scripted",
        )

    async def _play(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        step = self._select(request)
        self.requests.append(request)
        if callable(step) and not isinstance(step, list | Fail | Delay | Match):
            step = step(request)
        if isinstance(step, Delay):
            await asyncio.sleep(step.seconds)
            step = step.then
        if isinstance(step, Fail):
            raise RetryableError(step.message)
        if isinstance(step, Match | Delay):
            raise TypeError("a Match or Delay must wrap a reply, tool calls or a failure")
        if isinstance(step, str):
            text = fill_placeholders(step, request)
            for word in _words(text):
                yield TextDelta(word)
            yield ModelFinished(prompt_tokens=_count(request), completion_tokens=len(_words(text)))
            return
        for n, call in enumerate(step):
            args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            yield ToolCallRequested(
                id=f"call_{len(self.requests)}_{n}", name=call.name, arguments=args
            )
        yield ModelFinished(prompt_tokens=_count(request), finish_reason="tool_calls")


def _from_stored(step: ScriptStep) -> Step:
    played: str | list[Call] | Fail
    if step.fail is not None:
        played = Fail(step.fail)
    elif step.tool_calls:
        played = [Call(c.name, c.arguments) for c in step.tool_calls]
    else:
        played = step.reply or ""
    timed: Step = Delay(step.delay_s, played) if step.delay_s else played
    return Match(step.match, timed) if step.match is not None else timed


def fill_placeholders(text: str, request: ChatRequest) -> str:
    if "{{" not in text:
        return text
    values = {
        "{{last_user}}": _last(request, "user"),
        "{{last_tool}}": _last(request, "tool"),
        "{{context}}": " ".join(
            str(m.get("content") or "") for m in request.messages if m.get("role") == "system"
        ),
        "{{history}}": " | ".join(
            str(m.get("content") or "")
            for m in request.messages
            if m.get("role") in ("user", "assistant") and m.get("content")
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
