"""Wire models of the OpenAI chat-completions shape, as the agent routes take and answer it.

Only what maps onto a turn is accepted: messages (text, or text parts), ``stream``, and the
sampling fields an OpenAI client may send out of habit (accepted and left to the agent's model
profile). What would change the meaning of the answer (client-side ``tools``, ``n`` above 1, a
``response_format`` other than text, log-probabilities, audio) is refused with a 422 naming it:
an agent answers with its own tools and in its own words.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.strict import StrictScalars
from serving.gateway.protocol import MAX_MESSAGE_CHARS

AGENT_MODEL_PREFIX = "agent:"
MAX_CHAT_MESSAGES = 200


class TextPart(StrictScalars):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str = Field(max_length=MAX_MESSAGE_CHARS)


class ChatMessageIn(StrictScalars):
    """One message of the request. ``tool`` messages and assistant tool calls have no place:
    the agent's tools are its own."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: (
        Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
        | Annotated[list[TextPart], Field(max_length=MAX_CHAT_MESSAGES)]
    )
    name: str | None = Field(None, max_length=64)

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(StrictScalars):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    include_obfuscation: bool | None = None


class ResponseFormat(StrictScalars):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]


class ChatCompletionRequest(StrictScalars):
    """``POST /v1/agents/{id}/chat/completions`` (``model`` is free there) or
    ``POST /v1/chat/completions`` (``model: "agent:<id>"``)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("", max_length=200)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(
        None, max_length=200, description="Not used: the acting user is X-Wonder-User"
    )
    metadata: dict[str, str] | None = Field(
        None,
        max_length=16,
        description="conversation_id: continue that conversation (else a new one is started)",
    )
    n: int = Field(1, ge=1, le=1, description="One answer: an agent's turn has one")
    response_format: ResponseFormat | None = None
    logprobs: bool = Field(False, description="Not available: must be false")
    tools: list[Any] | None = Field(
        None, max_length=0, description="Not available: an agent calls its own tools"
    )
    tool_choice: Literal["none"] | None = None
    parallel_tool_calls: bool | None = None
    # Sampling: the agent's model profile decides; accepted so that clients need not strip them.
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: str | list[str] | None = None
    store: bool | None = None

    @model_validator(mode="after")
    def _ends_with_user(self) -> ChatCompletionRequest:
        if self.messages[-1].role != "user":
            raise ValueError("messages: the last message must be the user's (it starts the turn)")
        if not self.messages[-1].text.strip():
            raise ValueError("messages: the last user message is empty")
        total = len(turn_input(self, continuing=False))  # the longest the turn's input gets
        if total > MAX_MESSAGE_CHARS:
            raise ValueError(
                f"messages: {total} characters in all (with the earlier ones quoted), at most "
                f"{MAX_MESSAGE_CHARS}: they become one message of the conversation"
            )
        return self

    @property
    def conversation_id(self) -> str | None:
        return (self.metadata or {}).get("conversation_id")


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"


class CompletionUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(BaseModel):
    """The answer: the agent's messages of the turn, joined."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    conversation_id: str = Field(description="Wonder: the conversation the turn ran in")


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    conversation_id: str


def turn_input(request: ChatCompletionRequest, continuing: bool) -> str:
    """What the turn is asked: the last user message; in a new conversation, the messages before
    it come first as a quoted transcript (an OpenAI client sends the whole chat each time; a
    conversation that goes on has it already)."""
    last = request.messages[-1].text
    earlier = request.messages[:-1]
    if continuing or not earlier:
        return last
    lines = [f"{m.role}: {m.text}" for m in earlier]
    return "Earlier in this chat:\n" + "\n".join(lines) + "\n\n" + last
