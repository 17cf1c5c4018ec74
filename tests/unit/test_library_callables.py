"""The default library's Python callables: the calculator evaluates arithmetic, and only that."""

from __future__ import annotations

import math

import pytest

from core.errors import InvalidInput
from library.callables import calculate, evaluate


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 * (3 + 4)", 14),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("-2 ** 3", -8),
        ("2 ** -1", 0.5),
        ("sqrt(16) + abs(-1)", 5.0),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("round(pi, 2)", 3.14),
        ("1e3 / 8", 125.0),
        ("  1 + 1  ", 2),
    ],
)
def test_arithmetic(expression: str, value: float) -> None:
    assert math.isclose(evaluate(expression), value)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os').system('true')", "unsupported"),
        ("().__class__", "unsupported"),
        ("x + 1", "unsupported"),
        ("open('/etc/passwd')", "unsupported"),
        ("abs(x=1)", "unsupported"),
        ("'a' * 3", "unsupported"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent"),
        ("10 ** 200", "too large"),
        ("1e308 * 10", "too large"),
        ("sqrt(-1)", "no finite value"),
        ("(-8) ** 0.5", "complex"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 201, "longer than"),
    ],
)
def test_refuses_everything_else(expression: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        evaluate(expression)


def test_calculate_task_shape() -> None:
    data = {"input": {"expression": "1+2"}, "previous": None, "expression": "1+2"}
    assert calculate(data) == {"expression": "1+2", "result": 3}
    with pytest.raises(InvalidInput, match="expression"):
        calculate({"input": {}})
