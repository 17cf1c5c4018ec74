"""The executor: library tasks run as Ray remote functions.

``run_task`` is plain async Python (testable without Ray); ``execute_task`` is the Ray remote
function the Conversation and the WorkflowCoordinator dispatch to. A task's actions run in order;
each gets the task input plus the previous action's output, and the last output is the result.
Business errors come back as a failed ``ToolResult``-shaped dict; infrastructure errors raise so the
caller's retry policy applies.
"""

from __future__ import annotations

import re
from typing import Any

import ray

from actors.actions import ActionContext, JsonObject, get_action
from core.domain import TaskDef
from core.errors import NonRetryableError

_TEMPLATE = re.compile(r"\{\{\s*([a-zA-Z_][\w.]*)\s*\}\}")


def fill_templates(value: Any, data: JsonObject) -> Any:
    """Fill ``{{input.x}}`` / ``{{previous.y}}`` in strings (a whole-string template keeps type)."""
    if isinstance(value, str):
        whole = _TEMPLATE.fullmatch(value.strip())
        if whole:
            return _lookup(data, whole.group(1))
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


async def run_task(task: TaskDef, task_input: JsonObject, ctx: ActionContext) -> JsonObject:
    """Run ``task``'s actions in order; returns ``{"success", "result"|"error"}``."""
    data: JsonObject = {"input": task_input, "previous": None, **task_input}
    result: Any = None
    try:
        for step in task.actions:
            fn = get_action(step.kind)
            result = await fn(fill_templates(step.params, data), data, ctx)
            data = {**data, "previous": result}
    except NonRetryableError as exc:
        return {"success": False, "error": exc.to_dict()}
    return {"success": True, "result": result}


@ray.remote(num_cpus=0, max_retries=0)
def execute_task(task_json: str, task_input: JsonObject, ctx: ActionContext) -> JsonObject:
    """Ray entry point: run a task definition (JSON) in a worker process."""
    import asyncio

    return asyncio.run(run_task(TaskDef.model_validate_json(task_json), task_input, ctx))
