"""The Conversation's pure core: context assembly and the agent loop's next step.

Theory of operation: a turn is a loop of model calls. After each call, ``plan_after_model`` looks
at what the model said: tool calls become ``DispatchTool`` (valid input, permitted tool) or
``ReturnToolError`` (anything else — the model sees the error and can correct itself); a plain
answer becomes ``AppendAgentMessage`` + ``CompleteTurn``. After tools return, ``plan_after_tools``
appends the call and its results to the turn's transcript and asks for another model call — without
tools once ``max_moves_per_turn`` is reached, so the agent must answer. Nothing here does I/O: no
Ray, no store, no clock, no ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, assert_never

from jsonschema import Draft202012Validator

from actors.conversation.domain import (
    AppendAgentMessage,
    AwaitOperations,
    CallModel,
    CompleteTurn,
    Decision,
    DispatchTool,
    ModelAnswered,
    ReturnToolError,
    ToolCatalog,
    ToolsReturned,
    TurnProgress,
)
from core.domain import (
    Message,
    MessageRole,
    ModelProfile,
    Persona,
    Tool,
    ToolError,
    ToolResult,
    resolved_tool_calling,
)
from core.errors import ErrorCode
from core.llm.protocol import ChatRequest, ToolCallRequested, ToolSpec

JsonObject = dict[str, Any]

MUST_ANSWER_NOTE = (
    "You have used every tool call this turn allows. Answer the user now with what you have."
)


# --------------------------------------------------------------------------- context assembly


def history_messages(messages: Sequence[Message], agent_id: str | None) -> list[JsonObject]:
    """Stored messages → OpenAI chat messages (other agents' words are shown as user turns)."""
    out: list[JsonObject] = []
    for message in messages:
        if message.role is MessageRole.USER:
            out.append({"role": "user", "content": message.content})
        elif message.role is MessageRole.AGENT:
            own = agent_id is None or message.author == agent_id
            role = "assistant" if own else "user"
            content = message.content if own else f"[{message.author}] {message.content}"
            out.append({"role": role, "content": content})
    return out


def assemble_context(
    persona: Persona,
    profile: ModelProfile,
    history: Sequence[Message],
    catalog: ToolCatalog,
    agent_id: str | None,
    system_context: str = "",
) -> ChatRequest:
    """The built-in default context: system prompt (+ hook context) + recent turns + tool specs.

    ``history`` is the conversation's messages of the recent turns, the current user message last.
    """
    system = persona.system_prompt
    if system_context:
        system = f"{system}\n\n{system_context}"
    messages = [{"role": "system", "content": system}, *history_messages(history, agent_id)]
    return ChatRequest(
        messages=messages,
        tools=[tool_spec(tool) for tool in catalog.visible()],
        model=profile.model,
        temperature=profile.temperature,
        max_tokens=profile.max_tokens,
        timeout_s=profile.timeout_s,
        tool_calling=resolved_tool_calling(profile),
    )


def tool_spec(tool: Tool) -> ToolSpec:
    return ToolSpec(name=tool.name, description=tool.description, parameters=tool.input_schema)


def request_for_step(base: ChatRequest, step: CallModel) -> ChatRequest:
    """The request for the next model call of a turn: the base context plus this turn's moves."""
    messages = [*base.messages, *step.transcript]
    tools = base.tools
    if not step.tools_allowed:
        messages.append({"role": "system", "content": MUST_ANSWER_NOTE})
        tools = []
    return ChatRequest(
        messages=messages,
        tools=tools,
        model=base.model,
        temperature=base.temperature,
        max_tokens=base.max_tokens,
        timeout_s=base.timeout_s,
        tool_calling=base.tool_calling,
    )


# --------------------------------------------------------------------------- the loop


def plan(
    progress: TurnProgress,
    event: ModelAnswered | ToolsReturned,
    catalog: ToolCatalog,
    max_moves: int,
    pending_operations: int = 0,
) -> list[Decision]:
    """The next decisions of a turn after ``event``.

    ``pending_operations`` counts this turn's async operations not yet delivered: an answer while
    some are out keeps the turn active instead of completing it.
    """
    match event:
        case ModelAnswered():
            return plan_after_model(event, catalog, pending_operations)
        case ToolsReturned():
            return [plan_after_tools(progress, event, max_moves)]
        case _:
            assert_never(event)


def plan_after_model(
    answer: ModelAnswered, catalog: ToolCatalog, pending_operations: int = 0
) -> list[Decision]:
    if not answer.tool_calls:
        then = AwaitOperations() if pending_operations > 0 else CompleteTurn()
        return [AppendAgentMessage(answer.text), then]
    return [plan_tool_call(call, catalog) for call in answer.tool_calls]


def async_ack(tool_call_id: str, operation_id: str) -> ToolResult:
    """What the model hears right after dispatching an async tool."""
    return ToolResult(
        tool_call_id=tool_call_id,
        success=True,
        result={
            "status": "dispatched",
            "operation_id": operation_id,
            "note": "This runs in the background. Tell the user you are on it; the result will "
            "arrive later in this conversation.",
        },
    )


def pending_operations_note(pending: Sequence[Any]) -> str:
    """System context listing background work still out, across all active turns."""
    if not pending:
        return ""
    lines = [
        f"- {op.tool_name} (operation {op.id}, started in turn {op.turn_id})" for op in pending
    ]
    return "Background operations still running:\n" + "\n".join(lines)


def operation_result_message(tool_name: str, operation_id: str, result: ToolResult) -> JsonObject:
    """The message that hands a finished async operation's result to the model."""
    outcome = "finished" if result.success else "failed"
    return {
        "role": "user",
        "content": f"[background result] {tool_name} (operation {operation_id}) {outcome}: "
        f"{tool_result_text(result)}. Tell the user what it means.",
    }


def plan_after_tools(progress: TurnProgress, returned: ToolsReturned, max_moves: int) -> CallModel:
    transcript = (*progress.transcript, *tool_exchange(returned.calls, returned.results))
    return CallModel(transcript=transcript, tools_allowed=progress.moves_made + 1 < max_moves)


def tool_exchange(
    calls: Sequence[ToolCallRequested], results: Sequence[ToolResult]
) -> list[JsonObject]:
    """The assistant's tool-call message and one tool message per result (OpenAI shape)."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
    replies = [
        {"role": "tool", "tool_call_id": r.tool_call_id, "content": tool_result_text(r)}
        for r in results
    ]
    return [assistant, *replies]


def tool_result_text(result: ToolResult) -> str:
    if result.success:
        value = result.result
        return value if isinstance(value, str) else json.dumps(value, default=str)
    assert result.error is not None
    return json.dumps({"error": result.error.model_dump(mode="json")})


def plan_tool_call(call: ToolCallRequested, catalog: ToolCatalog) -> DispatchTool | ReturnToolError:
    """Validate one tool call: known, permitted, JSON, schema-valid → dispatch; else an error."""
    tool = catalog.by_name.get(call.name)
    if tool is None:
        known = ", ".join(sorted(t.name for t in catalog.visible())) or "none"
        return _refuse(call, ErrorCode.NOT_FOUND, f"no tool named {call.name!r} (tools: {known})")
    if not catalog.permitted(call.name):
        return _refuse(call, ErrorCode.PERMISSION_DENIED, f"tool {call.name!r} is not allowed")
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return _refuse(call, ErrorCode.INVALID_INPUT, f"arguments are not valid JSON: {exc.msg}")
    problem = schema_problem(tool.input_schema, arguments)
    if problem is not None:
        return _refuse(call, ErrorCode.INVALID_INPUT, problem)
    if (
        tool.target_type == "agent"
        and catalog.allowed_agents is not None
        and tool.target_id not in catalog.allowed_agents
    ):
        message = f"agent {tool.target_id!r} is not among this persona's allowed agents"
        return _refuse(call, ErrorCode.PERMISSION_DENIED, message)
    return DispatchTool(
        call=call, tool=tool, input=apply_input_mapping(tool.input_mapping, arguments)
    )


def schema_problem(schema: JsonObject, value: Any) -> str | None:
    """The first JSON Schema violation, with its path, or None when ``value`` is valid."""
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.path) or "(root)"
    return f"input does not match the tool's schema at {where}: {first.message}"


def apply_input_mapping(mapping: dict[str, str] | None, arguments: JsonObject) -> JsonObject:
    """Map the model's arguments onto the target's input.

    Each mapping entry is ``target_key: source``; a source starting with ``$.`` is a dotted path
    into the arguments, anything else is a literal. Without a mapping the input passes through.
    """
    if not mapping:
        return arguments
    out: JsonObject = {}
    for target, source in mapping.items():
        out[target] = _path(arguments, source[2:]) if source.startswith("$.") else source
    return out


def _path(value: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _refuse(call: ToolCallRequested, code: ErrorCode, message: str) -> ReturnToolError:
    error = ToolError(code=code, message=message, retriable=False)
    return ReturnToolError(
        call=call, result=ToolResult(tool_call_id=call.id, success=False, error=error)
    )


def build_catalog(persona: Persona, tools: Sequence[Tool]) -> ToolCatalog:
    constraints = persona.constraints
    return ToolCatalog(
        by_name={tool.name: tool for tool in tools},
        allow=tuple(constraints.allow) if constraints.allow is not None else None,
        deny=tuple(constraints.deny),
        allowed_agents=(
            tuple(constraints.allowed_agents) if constraints.allowed_agents is not None else None
        ),
    )


def recent_turn_ids(turn_ids: Sequence[str], current: str, limit: int) -> list[str]:
    """The ``limit`` most recent turns before ``current``, plus ``current`` itself."""
    earlier = [t for t in turn_ids if t < current]
    return [*(earlier[-limit:] if limit else []), current]
