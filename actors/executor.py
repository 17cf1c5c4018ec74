"""The executor: library tasks as sequences of actions (plain async Python, testable without Ray).

``run_task`` runs a task's actions in order; each gets the task input plus the previous action's
output, and the last output is the result. Business errors come back as a failed ``TaskOutcome``
(the caller's model hears them); infrastructure errors (``RetryableError``) raise so the caller's
retry policy applies. ``cluster.executor`` runs this as a Ray remote function; the ``TaskRunner``
port is how actors reach it.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from actors.actions import (
    context_actions,
    http_request,
    llm_action,
    python_call,
    workspace_actions,
)
from actors.actions.registry import ActionContext, ActionServices, get_action
from core import tracing
from core.client_secrets import names_a_secret
from core.domain import TaskDef
from core.errors import ErrorCode, InvalidInput, NonRetryableError
from core.jsontypes import JsonObject
from core.llm import recording
from core.llm.recording import CallScope
from core.model_calls import CallSource
from core.ports import TaskContext, TaskOutcome

try:  # the memory stack is an optional extra: without it, memory actions are unknown kinds
    from actors.actions import artifact_actions, memory_actions
except ImportError:  # pragma: no cover - exercised only without the memory extra
    artifact_actions = None  # type: ignore[assignment]
    memory_actions = None  # type: ignore[assignment]

BUILTIN_ACTIONS = (
    context_actions,
    http_request,
    llm_action,
    python_call,
    memory_actions,
    workspace_actions,
    artifact_actions,
)

_TEMPLATE = re.compile(r"\{\{\s*([a-zA-Z_][\w.]*)\s*\}\}")


def fill_templates(value: Any, data: JsonObject) -> Any:
    """Fill ``{{input.x}}`` / ``{{previous.y}}`` in strings (a whole-string template keeps type).

    A value filled in from the input (what a model or a caller sends) may not name a secret:
    only the stored task definition references secrets (``core.client_secrets``)."""
    if isinstance(value, str):
        whole = _TEMPLATE.fullmatch(value.strip())
        if whole:
            filled = _lookup(data, whole.group(1))
            if names_a_secret(filled):
                raise InvalidInput(
                    f"{{{{{whole.group(1)}}}}}: a value from the task's input cannot name a "
                    "secret; secrets are named only in the task definition"
                )
            return filled
        return _TEMPLATE.sub(lambda m: str(_lookup(data, m.group(1))), value)
    if isinstance(value, dict):
        return {k: fill_templates(v, data) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_templates(v, data) for v in value]
    return value


def _lookup(data: JsonObject, path: str) -> Any:
    current: Any = data
    for part in path.split("."):
        if isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current


async def run_task(
    task: TaskDef, task_input: JsonObject, context: TaskContext, services: ActionServices
) -> TaskOutcome:
    """Run ``task``'s actions in order; a business error ends it as a failed outcome."""
    with (
        tracing.attached(context.traceparent),  # the caller's span: its trace, across processes
        recording.scoped(CallScope(source=task_call_source(context))),
        tracing.span(
            f"run_task {task.id}",
            conversation_id=context.conversation_id,
            turn_id=context.turn_id,
            attributes=task_attributes(task, context),
        ) as span,
    ):
        outcome = await _run_actions(task, task_input, ActionContext.of(context, services))
        if outcome.error is not None:
            span.fail(str(outcome.error.code), outcome.error.message)
        return outcome


def task_call_source(context: TaskContext) -> CallSource:
    """What the model calls of a task's ``llm`` actions are recorded as coming from."""
    return CallSource(
        client_id=context.client_id,
        conversation_id=context.conversation_id,
        turn_id=context.turn_id,
        agent_id=context.agent_id,
        run_id=context.run_id,
        node_id=context.node_id,
        hook=context.hook,
        hook_run_id=context.hook_run_id,
    )


def task_attributes(task: TaskDef, context: TaskContext) -> tracing.Attributes:
    attributes: tracing.Attributes = {
        "wonder.task.id": task.id,
        "wonder.task.version": task.version,
    }
    for key, value in (
        ("gen_ai.conversation.id", context.conversation_id),
        ("gen_ai.agent.id", context.agent_id),
        ("wonder.workflow.run_id", context.run_id),
        ("wonder.workflow.node_id", context.node_id),
        ("wonder.hook", context.hook),
    ):
        if value is not None:
            attributes[key] = value
    return attributes


async def _run_actions(task: TaskDef, task_input: JsonObject, ctx: ActionContext) -> TaskOutcome:
    limits = ctx.services.settings
    data: JsonObject = {"input": task_input, "previous": None, **task_input}
    result: Any = None
    try:
        for index, step in enumerate(task.actions):
            fn = get_action(step.kind)
            try:
                result = await asyncio.wait_for(
                    fn(fill_templates(step.params, data), data, ctx), limits.action_timeout_s
                )
            except TimeoutError:
                raise NonRetryableError(
                    f"action {index} ({step.kind}) ran longer than {limits.action_timeout_s:g}s",
                    code=ErrorCode.TIMEOUT,
                ) from None
            check_output_size(index, step.kind, result, limits.action_output_max_bytes)
            data = {**data, "previous": result}
    except NonRetryableError as exc:
        return TaskOutcome.failed(exc)
    return TaskOutcome.ok(result)


def check_output_size(index: int, kind: str, result: Any, max_bytes: int) -> None:
    """Refuse an action result larger than ``max_bytes`` as JSON (or not JSON at all)."""
    try:
        size = len(json.dumps(result, default=str).encode())
    except (TypeError, ValueError) as exc:
        raise NonRetryableError(f"action {index} ({kind}) returned no JSON value: {exc}") from None
    if size > max_bytes:
        raise NonRetryableError(
            f"action {index} ({kind}) returned {size} bytes; the limit is {max_bytes}"
        )
