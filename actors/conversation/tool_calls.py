"""Validating the model's tool calls, purely: known, permitted, JSON, schema-valid, agent allowed.

A valid call becomes a dispatch (sync) or an operation start (async); anything else becomes a
business error the model sees as the call's result, so it can correct itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from actors.conversation.domain import (
    DispatchTool,
    ReturnToolError,
    StartOperation,
    ToolCatalog,
    ToolPlan,
)
from core.domain import AsyncOperation, Persona, Tool, ToolError, ToolResult
from core.errors import ErrorCode
from core.json_schemas import errors as schema_errors
from core.jsontypes import JsonObject
from core.llm.protocol import ToolCallRequested
from core.route_model import ToolPermissions

MODE_ARGUMENT = "mode"
"""A reserved argument of agent tools: ``delegate`` or ``loop_in`` overrides the tool's
``invocation_mode`` for one call (offered to the model in the tool's spec)."""
MODES = ("delegate", "loop_in")


UNCHECKED = "unchecked"
"""``plan_tool_call``'s schema problem when the shell did not check the arguments."""


def arguments_problem(call: ToolCallRequested, catalog: ToolCatalog) -> str | None:
    """How ``call``'s arguments break its tool's input schema (None: they do not, or the call
    is refused for another reason planning finds). Run by the shell off the event loop."""
    tool = catalog.by_name.get(call.name)
    if tool is None:
        return None
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return None
    if tool.target_type == "agent" and isinstance(arguments, dict):
        arguments.pop(MODE_ARGUMENT, None)
    return schema_problem(tool.input_schema, arguments)


def plan_tool_call(
    call: ToolCallRequested, catalog: ToolCatalog, checked: str | None = UNCHECKED
) -> DispatchTool | ReturnToolError:
    """Validate one tool call: known, permitted, JSON, schema-valid → dispatch; else an error.

    ``checked``: the schema problem the shell found (``arguments_problem``), or ``UNCHECKED``."""
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
    mode = None
    if tool.target_type == "agent" and isinstance(arguments, dict):
        mode = arguments.pop(MODE_ARGUMENT, None)
        if mode is not None and mode not in MODES:
            message = f"{MODE_ARGUMENT} is one of {list(MODES)}, not {mode!r}"
            return _refuse(call, ErrorCode.INVALID_INPUT, message)
    problem = schema_problem(tool.input_schema, arguments) if checked == UNCHECKED else checked
    if problem is not None:
        return _refuse(call, ErrorCode.INVALID_INPUT, problem)
    if (
        tool.target_type == "agent"
        and catalog.allowed_agents is not None
        and tool.target_id not in catalog.allowed_agents
    ):
        message = f"agent {tool.target_id!r} is not among this persona's allowed agents"
        return _refuse(call, ErrorCode.PERMISSION_DENIED, message)
    tool_input = apply_input_mapping(tool.input_mapping, arguments)
    if mode is not None:
        tool_input = {**tool_input, MODE_ARGUMENT: mode}
    return DispatchTool(call=call, tool=tool, input=tool_input)


def plan_tool_calls(
    calls: Sequence[ToolCallRequested],
    catalog: ToolCatalog,
    conversation_id: str,
    turn_id: str,
    operation_ids: Sequence[str],
    at: datetime,
    problems: Sequence[str | None] | None = None,
) -> tuple[ToolPlan, ...]:
    """Every call of one answer: dispatched, started as an async operation, or refused.
    ``problems``: the shell's schema checks, one per call (None: planning checks)."""
    plans: list[ToolPlan] = []
    checks: Sequence[str | None] = problems if problems is not None else [UNCHECKED] * len(calls)
    for call, op_id, checked in zip(calls, operation_ids, checks, strict=True):
        match plan_tool_call(call, catalog, checked):
            case DispatchTool(tool=tool, input=tool_input) if tool.is_async:
                operation = AsyncOperation(
                    id=op_id,
                    conversation_id=conversation_id,
                    turn_id=turn_id,
                    tool_call_id=call.id,
                    tool_id=tool.id,
                    tool_name=tool.name,
                    input=tool_input,
                    created_at=at,
                )
                ack = async_ack(call.id, op_id)
                plans.append(StartOperation(call, operation, ack, tool))
            case planned:
                plans.append(planned)
    return tuple(plans)


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


def schema_problem(schema: JsonObject, value: Any) -> str | None:
    """The first JSON Schema violation, with its path, or None when ``value`` is valid."""
    found = schema_errors(schema, value)
    if not found:
        return None
    first = found[0]
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


def narrowed(catalog: ToolCatalog, permissions: ToolPermissions) -> ToolCatalog:
    """``catalog`` under a message's permissions override: its ``allow`` can only take tools
    away from the persona's (an intersection), its ``deny`` adds to the persona's."""
    allow = catalog.allow
    if permissions.allow is not None:
        asked = tuple(permissions.allow)
        allow = asked if allow is None else tuple(name for name in allow if name in asked)
    deny = tuple(dict.fromkeys([*catalog.deny, *permissions.deny]))
    return replace(catalog, allow=allow, deny=deny)


def call_arguments(call: ToolCallRequested) -> JsonObject:
    """The call's arguments as an object, for the record (unparseable text is kept raw)."""
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {"_raw": call.arguments}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}
