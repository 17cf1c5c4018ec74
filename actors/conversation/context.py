"""The model's context, built purely: stored history → OpenAI chat messages, tool specs, the
request for each model call of a turn, and what tool results and async results look like to it.

Nothing here does I/O: the shell loads what these functions need and passes it in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import assert_never

from actors.conversation.domain import ToolCatalog
from actors.conversation.tool_calls import MODE_ARGUMENT, MODES
from core.context_contract import AssembledRequest, request_messages
from core.domain import (
    AgentCaller,
    AsyncOperation,
    Caller,
    Message,
    MessageRole,
    ModelProfile,
    Move,
    Persona,
    Tool,
    ToolResult,
    UserCaller,
    WorkflowCaller,
    resolved_tool_calling,
)
from core.errors import InvalidInput
from core.jsontypes import JsonObject
from core.llm.protocol import ChatRequest, ToolCallRequested, ToolSpec
from core.thinking import thinking_body

DECLINE_TOOL = "decline"
DECLINE_SPEC = ToolSpec(
    DECLINE_TOOL,
    "Decline this request when you cannot or should not do it, and say why: the agent or "
    "workflow that asked is told (AGENT_DECLINED) and may ask again with more context.",
    {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": 1000}},
        "required": ["reason"],
    },
)
"""Offered to turns run for another agent or a workflow (seed 001: "Delegated Agent Errors")."""

MUST_ANSWER_NOTE = (
    "You have used every tool call this turn allows. Answer the user now with what you have."
)


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
    replied_to: Message | None = None,
    may_decline: bool = False,
) -> ChatRequest:
    """The built-in default context: system prompt (+ hook context) + recent turns + tool specs.

    ``history`` is the conversation's messages of the recent turns, the current user message last;
    ``replied_to`` is the message the user replies to, shown to the model with that message.
    """
    system = persona.system_prompt
    if system_context:
        system = f"{system}\n\n{system_context}"
    chat = history_messages(history, agent_id)
    if replied_to is not None and chat and chat[-1]["role"] == "user":
        chat[-1] = {**chat[-1], "content": f"{reply_note(replied_to)}\n{chat[-1]['content']}"}
    messages = [{"role": "system", "content": system}, *chat]
    tools = [tool_spec(tool) for tool in catalog.visible()]
    if may_decline and DECLINE_TOOL not in catalog.by_name:
        tools.append(DECLINE_SPEC)
    return ChatRequest(
        messages=messages,
        tools=tools,
        model=profile.model,
        temperature=profile.temperature,
        max_tokens=profile.max_tokens,
        timeout_s=profile.timeout_s,
        tool_calling=resolved_tool_calling(profile),
        reasoning=thinking_body(profile),
    )


REPLY_QUOTE_CHARS = 500


def may_decline(caller: Caller) -> bool:
    """Whether a turn may decline: one run for another agent or a workflow (not a user's)."""
    match caller:
        case AgentCaller() | WorkflowCaller():
            return True
        case UserCaller():
            return False
        case _:
            assert_never(caller)


def declined(calls: Sequence[ToolCallRequested], offered: Sequence[ToolSpec]) -> str | None:
    """The reason, when the model called the ``decline`` tool it was offered."""
    if DECLINE_SPEC not in offered:
        return None
    for call in calls:
        if call.name == DECLINE_TOOL:
            try:
                arguments = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:
                arguments = {}
            reason = arguments.get("reason") if isinstance(arguments, dict) else None
            return str(reason or "no reason given")[:1000]
    return None


def reply_note(replied_to: Message) -> str:
    """How the model sees which message the user answers (seed 004: replies)."""
    quoted = " ".join(replied_to.content.split())
    if len(quoted) > REPLY_QUOTE_CHARS:
        quoted = quoted[: REPLY_QUOTE_CHARS - 1] + "…"
    return f'[in reply to {replied_to.author}: "{quoted}"]'


def tool_spec(tool: Tool) -> ToolSpec:
    parameters = tool.input_schema
    if tool.target_type == "agent" and parameters.get("type") == "object":
        mode = {
            "type": "string",
            "enum": list(MODES),
            "description": f"delegate: a private one-off answer; loop_in: the agent joins this "
            f"conversation and answers here (default: {tool.invocation_mode})",
        }
        properties = {**(parameters.get("properties") or {}), MODE_ARGUMENT: mode}
        parameters = {**parameters, "properties": properties}
    shortcut = tool.shortcut.pattern if tool.shortcut else None
    return ToolSpec(tool.name, tool.description, parameters, shortcut=shortcut)


def openai_body(request: ChatRequest) -> JsonObject:
    """A request in the OpenAI chat-completions shape (what a context-assembly hook is given)."""
    body: JsonObject = {
        "model": request.model,
        "messages": list(request.messages),
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        body["tools"] = [spec.to_openai() for spec in request.tools]
    return body


def request_from_hook(
    assembled: AssembledRequest, default: ChatRequest, catalog: ToolCatalog
) -> ChatRequest:
    """The request a hook assembled, as the loop will send it: the model, timeout and tool-calling
    mode stay the profile's; tools must be among the persona's (their specs are the library's);
    without ``tools`` the persona's tools are offered as usual."""
    tools = default.tools
    if assembled.tools is not None:
        known = {spec.name: spec for spec in default.tools}
        unknown = sorted({t.function.name for t in assembled.tools} - set(known))
        if unknown:
            raise InvalidInput(
                f"the context-assembly hook offered tools this persona does not have: {unknown}"
            )
        tools = [known[t.function.name] for t in assembled.tools]
    return ChatRequest(
        messages=request_messages(assembled),
        tools=tools,
        model=default.model,
        temperature=(
            default.temperature if assembled.temperature is None else assembled.temperature
        ),
        max_tokens=default.max_tokens if assembled.max_tokens is None else assembled.max_tokens,
        timeout_s=default.timeout_s,
        tool_calling=default.tool_calling,
        reasoning=default.reasoning,
    )


def request_for_step(
    base: ChatRequest, transcript: Sequence[JsonObject], tools_allowed: bool
) -> ChatRequest:
    """The request for the next model call of a turn: the base context plus this loop's moves."""
    messages = [*base.messages, *transcript]
    tools = base.tools
    if not tools_allowed:
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
        reasoning=base.reasoning,
    )


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


def pending_operations_note(pending: Sequence[AsyncOperation]) -> str:
    """System context listing background work still out, across all active turns."""
    if not pending:
        return ""
    lines = [
        f"- {op.tool_name} (operation {op.id}, started in turn {op.turn_id})" for op in pending
    ]
    return "Background operations still running:\n" + "\n".join(lines)


def operation_result_message(operation: AsyncOperation) -> JsonObject:
    """The message that hands a finished async operation's result to the model."""
    result = operation.result
    assert result is not None, "only completed operations are delivered"
    outcome = "finished" if result.success else "failed"
    return {
        "role": "user",
        "content": f"[background result] {operation.tool_name} (operation {operation.id}) "
        f"{outcome}: {tool_result_text(result)}. Tell the user what it means.",
    }


def turn_transcript(messages: Sequence[Message], moves: Sequence[Move]) -> list[JsonObject]:
    """A turn as memory extraction sees it, in order: its messages and every tool call with its
    arguments and result or error (seed 001's "turn transcript")."""
    entries: list[tuple[datetime, int, JsonObject]] = []
    for message in messages:
        entry: JsonObject = {
            "role": message.role.value,
            "author": message.author,
            "content": message.content,
        }
        entries.append((message.created_at, 0, entry))
    for move in moves:
        call, result = move.tool_call, move.tool_result
        if call is None:
            continue  # the model's words: its messages carry them
        entry = {"role": "tool_call", "id": call.id, "name": call.name, "arguments": call.input}
        if result is not None:
            entry["success"] = result.success
            entry["result"] = result.result
            entry["error"] = None if result.error is None else result.error.model_dump(mode="json")
        entries.append((move.created_at, 1, entry))
    return [entry for _at, _kind, entry in sorted(entries, key=lambda e: (e[0], e[1]))]


def recent_turn_ids(turn_ids: Sequence[str], current: str, limit: int) -> list[str]:
    """The ``limit`` most recent turns before ``current``, plus ``current`` itself."""
    earlier = [t for t in turn_ids if t < current]
    return [*(earlier[-limit:] if limit else []), current]
