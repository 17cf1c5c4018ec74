"""The spans of a turn's tools and hooks, and the failures they count (docs/observability.md).

``execute_tool {tool}`` (OpenTelemetry's GenAI conventions) wraps a dispatched tool call with
its retries; ``context_assembly {task}`` / ``memory_extraction {task}`` wrap a hook run with its
retries. Each is current while it runs, so what it calls in other processes (an executor task, a
workflow coordinator, a delegated conversation) joins the turn's trace under it. Arguments and
results go into the span only when the operator opts in to contents
(``core.tracing.capture_content``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from actors.conversation.domain import DispatchTool
from core import tracing
from core.domain import ToolResult
from core.metrics import Metrics
from core.model_calls import HookKind
from core.tracing import Span

TOOL_TYPES = {"task": "function", "workflow": "extension", "agent": "extension", "mcp": "extension"}


@dataclass(frozen=True, slots=True)
class HookRun:
    """One run of a persona's hook for a turn (its id is recorded on the turn)."""

    hook: HookKind
    task_id: str
    turn_id: str
    agent_id: str
    run_id: str


@contextmanager
def hook_span(run: HookRun, conversation_id: str, workflow: bool) -> Iterator[Span]:
    with tracing.span(
        f"{run.hook} {run.task_id}",
        conversation_id=conversation_id,
        turn_id=run.turn_id,
        attributes={
            "gen_ai.operation.name": run.hook,
            "gen_ai.conversation.id": conversation_id,
            "gen_ai.agent.id": run.agent_id,
            "wonder.hook": run.hook,
            "wonder.hook.run_id": run.run_id,
            "wonder.hook.task_id": run.task_id,
            "wonder.hook.workflow": workflow,
        },
    ) as span:
        yield span


@contextmanager
def tool_span(plan: DispatchTool, conversation_id: str, turn_id: str) -> Iterator[Span]:
    tool = plan.tool
    with tracing.span(
        f"execute_tool {tool.name}",
        conversation_id=conversation_id,
        turn_id=turn_id,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.call.id": plan.call.id,
            "gen_ai.tool.type": TOOL_TYPES.get(tool.target_type, "extension"),
            "gen_ai.tool.description": tool.description[:500],
            "gen_ai.conversation.id": conversation_id,
            "wonder.tool.target_type": tool.target_type,
            "wonder.tool.target_id": tool.target_id,
        },
    ) as span:
        if tracing.capture_content():
            span.set("gen_ai.tool.call.arguments", tracing.clipped(json.dumps(plan.input)))
        yield span


def end_tool_span(span: Span, result: ToolResult) -> None:
    """The tool's outcome on its span (a business error is the span's error too)."""
    if result.error is not None:
        span.fail(str(result.error.code), result.error.message)
    if tracing.capture_content():
        span.set("gen_ai.tool.call.result", tracing.clipped(json.dumps(result.result, default=str)))


def result_failed(metrics: Metrics, agent_id: str, tool: str, result: ToolResult) -> None:
    """Count a failed tool call (by agent, tool and code)."""
    if not result.success:
        code = str(result.error.code) if result.error is not None else "EXECUTION_FAILED"
        metrics.tool_failed(agent_id, tool, code)
