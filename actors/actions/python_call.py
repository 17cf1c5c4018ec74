"""``python``: call a registered Python callable — how libraries add their own actions.

``params.callable`` is ``"module:function"``; only modules under the allowed prefixes
(``library.``, ``actors.``, ``jobs.``) are importable, so a library file cannot name arbitrary code.
The function gets the task data (a dict) and may be sync or async.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from actors.actions import ActionContext, JsonObject, action
from core.errors import InvalidInput, NotFound

ALLOWED_PREFIXES = ("library.", "actors.", "jobs.")


@action("python")
async def python_call(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    target = str(params.get("callable") or "")
    module_name, _, attr = target.partition(":")
    if not module_name or not attr or not module_name.startswith(ALLOWED_PREFIXES):
        raise InvalidInput(f"python action needs 'module:function' under {ALLOWED_PREFIXES}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise NotFound(f"callable {target} not found") from exc
    result = fn(data)
    if inspect.isawaitable(result):
        result = await result
    return result
