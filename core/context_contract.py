"""The context-assembly hook's contract (version 1): what a persona's hook is given and what it
may answer (docs/internals/contracts.md "Hooks").

The hook is given everything the turn knows — the conversation, the turn, the persona, the model
profile, the resolved tool specs, the agent id — and the request the loop would send without it
(``request``, the OpenAI chat-completions shape for every provider). It answers with the complete
request to send (``{"contract": "wonder.context/v1", "request": {...}}``), which the loop sends as
it is and extends with tool calls and results as the turn goes on; or, as before this contract,
with ``{"system_context": "..."}`` to append to the default request's system prompt.

Pure: pydantic models and functions, no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import InvalidInput
from core.jsontypes import JsonObject

CONTEXT_CONTRACT = "wonder.context/v1"
MAX_MESSAGES = 2000


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    arguments: str = Field(max_length=200_000)


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One chat-completions message."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(None, max_length=1_000_000)
    name: str | None = Field(None, max_length=200)
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(None, max_length=200)


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=10_000)
    parameters: JsonObject = Field(default_factory=lambda: {"type": "object"})


class ToolSpecIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    function: FunctionSpec


class AssembledRequest(BaseModel):
    """The request a hook answers with (OpenAI chat-completions; the model comes from the
    persona's model profile, never from the hook)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    model: str | None = Field(None, max_length=200, description="Ignored: the profile decides")
    tools: list[ToolSpecIn] | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(None, ge=1, le=32768)

    @field_validator("messages")
    @classmethod
    def _some_content(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if not any(m.content for m in messages):
            raise ValueError("every message is empty")
        return messages


class HookAnswer(BaseModel):
    """What a context-assembly hook returns (either field; ``request`` wins when both are set)."""

    model_config = ConfigDict(extra="allow")

    contract: Literal["wonder.context/v1"] | None = None
    request: AssembledRequest | None = None
    system_context: str | None = Field(None, max_length=200_000)


def parse_hook_answer(raw: Any) -> HookAnswer:
    """The hook's answer, validated; ``InvalidInput`` says what is wrong with it."""
    if not isinstance(raw, dict):
        raise InvalidInput(
            f"the context-assembly hook answered {type(raw).__name__}, not an object"
        )
    try:
        answer = HookAnswer.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise InvalidInput(f"the context-assembly hook's answer is invalid: {problems}") from None
    if answer.request is not None and answer.contract != CONTEXT_CONTRACT:
        raise InvalidInput(f'a request from the hook must say "contract": "{CONTEXT_CONTRACT}"')
    return answer


def request_messages(request: AssembledRequest) -> list[JsonObject]:
    """The validated messages as plain JSON (unset fields left out)."""
    return [m.model_dump(exclude_none=True) for m in request.messages]
