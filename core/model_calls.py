"""A model call as recorded: the exact request sent, the response received, who served it, when.

One record per request a model was sent (docs/observability.md): a loop step is one call, or two
in the constrained tool-calling mode (``choose``, then ``fill`` or ``reply``), and none when a
tool's shortcut chose (nothing was sent). A hook task's ``llm`` action and a workflow's agent
node record theirs the same way. Records are written by the process that made the call
(``core.record_sink``), never through a conversation's log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from core.domain import Model, ToolError, Usage
from core.jsontypes import JsonObject

HookKind = Literal["context_assembly", "memory_extraction"]

CallPurpose = Literal["answer", "choose", "fill", "reply", "task"]
"""``answer``: one call with the tools as they are (or none); ``choose``/``fill``/``reply``: the
steps of the constrained tool-calling mode; ``task``: a task's ``llm`` action."""


class CallSource(Model):
    """What made the call: a conversation's turn (its loop, or a hook of it), or a workflow
    run's node (a task it ran, or an agent turn it called)."""

    client_id: str | None = None
    conversation_id: str | None = None
    turn_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    hook: HookKind | None = None
    hook_run_id: str | None = None
    step: int | None = Field(None, description="The turn's model loop iteration (1 = first)")


class ServedBy(Model):
    """Who answered: the local deployment and replica, or the provider's URL host."""

    provider: str
    deployment: str | None = None
    replica: str | None = None
    host: str | None = None
    response_model: str | None = None
    response_id: str | None = None


class RecordedToolCall(Model):
    id: str
    name: str
    arguments: str


class ModelResponse(Model):
    """What came back, as received (the text of every delta, the tool calls assembled)."""

    content: str = ""
    tool_calls: list[RecordedToolCall] = Field(default_factory=list)
    finish_reason: str | None = None


class CallTimings(Model):
    started_at: datetime
    duration_s: float
    first_token_s: float | None = Field(None, description="Request sent → first chunk received")
    decode_tokens_per_s: float | None = Field(
        None, description="Completion tokens over the time from the first chunk to the last"
    )


class ModelCallRecord(Model):
    """One model call (``GET .../turns/{turn_id}/calls``)."""

    id: str
    source: CallSource
    purpose: CallPurpose
    attempt: int = Field(1, description="1, or the retry this call was (the LLM retry policy)")
    profile_id: str | None = None
    provider: str
    model: str
    served_by: ServedBy | None = None
    request: JsonObject | None = Field(
        None, description="The body sent (OpenAI chat completions); None when in the object store"
    )
    request_ref: str | None = Field(None, description="Object store key of a large request")
    request_bytes: int = 0
    response: ModelResponse | None = None
    response_ref: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = Field(None, description="Estimated from the profile's prices")
    currency: str | None = None
    status: Literal["ok", "error"] = "ok"
    error: ToolError | None = None
    timings: CallTimings
    trace_id: str | None = None
    span_id: str | None = None
    created_at: datetime


LinkKind = Literal["hook_run", "workflow_run", "child_turn", "memory_write", "model"]


class TurnLink(Model):
    """Something a turn caused or used (``core.store`` ``turn_links``)."""

    turn_id: str
    kind: LinkKind
    target_id: str
    conversation_id: str | None = None
    at: datetime
    data: JsonObject = Field(default_factory=dict)


class UsageTotals(Model):
    """Summed model calls (a turn's, a conversation's, an agent's, a client's)."""

    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    currency: str | None = Field(None, description="None when no call had a price (or mixed)")
