"""Python callables the default library's tasks run (``python`` action, ``library.callables:...``).

Each takes the task data (the tool input merged with ``input`` and ``previous``) and returns JSON.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from core.callables import library_callable
from core.errors import InvalidInput

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e100

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, without ``eval``.

    Numbers, ``+ - * / // % **``, parentheses, ``pi``, ``e`` and ``abs round min max sqrt``.

    Raises:
        InvalidInput: the expression is not arithmetic, is too long, or has no finite value.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise InvalidInput(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise InvalidInput(f"not an arithmetic expression: {exc.msg}") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise InvalidInput("division by zero") from None
    except (OverflowError, ValueError) as exc:
        raise InvalidInput(f"no finite value: {exc}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput("the result is not a finite number")
    return value


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise InvalidInput(f"exponent {right} is larger than {MAX_EXPONENT}")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = _FUNCTIONS.get(node.func.id)
        if fn is not None and 1 <= len(node.args) <= 10:
            return _bounded(fn(*(_eval(arg) for arg in node.args)))
    raise InvalidInput(f"unsupported in arithmetic: {ast.unparse(node)!r}")


def _bounded(value: Any) -> Number:
    if isinstance(value, complex):
        raise InvalidInput("the result is a complex number")
    if abs(value) > MAX_MAGNITUDE:
        raise InvalidInput("the result is too large")
    return value  # type: ignore[no-any-return]


@library_callable
def calculate(data: dict[str, Any]) -> dict[str, Any]:
    """Task callable: ``{"expression": "2 * (3 + 4)"}`` → ``{"expression", "result"}``."""
    expression = data.get("expression")
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidInput("calculate needs an 'expression' string")
    return {"expression": expression, "result": evaluate(expression)}


@library_callable
async def sleep(data: dict[str, Any]) -> dict[str, Any]:
    """Wait ``seconds`` (≤ 300): a stand-in for slow work (research, builds) in examples."""
    import asyncio

    seconds = min(float(data.get("seconds") or data.get("input", {}).get("seconds") or 1.0), 300.0)
    await asyncio.sleep(seconds)
    return {"slept_s": seconds}


@library_callable
def echo(data: dict[str, Any]) -> dict[str, Any]:
    """Return the task's input unchanged."""
    return dict(data.get("input") or {})


@library_callable
def render_code_index(data: dict[str, Any]) -> dict[str, str]:
    """``code_index``'s last step: the ``repo.index`` answer (``previous``) and the tool specs as
    ``system_context`` — a map of what exists, fetched on demand with the tools (seed 001)."""
    index = data.get("previous") or {}
    lines: list[str] = []
    if index.get("available"):
        lines.append(
            f"You work on branch {index['branch']} of project {index['project_id']} "
            f"(merged into {index['default_branch']} only when the user asks)."
        )
        files = index.get("files") or []
        more = " (more not shown)" if index.get("files_truncated") else ""
        lines.append(f"Files{more}: " + (", ".join(files) if files else "(none yet)"))
        commits = index.get("commits") or []
        if commits:
            lines.append("Recent commits:")
            lines += [f"- {c['commit']} {c['subject']}" for c in commits]
        artifacts = index.get("artifacts") or []
        if artifacts:
            lines.append("Project artifacts (read them with artifact_read):")
            lines += [f"- {a['path']}: {a['title']}" for a in artifacts]
    tools = (data.get("input") or {}).get("tools") or []
    if tools:
        lines.append("Tools: " + "; ".join(f"{t['name']}: {t['description']}" for t in tools))
    return {"system_context": "\n".join(lines)}
