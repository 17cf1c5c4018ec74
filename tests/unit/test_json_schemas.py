"""Client JSON Schemas on RE2 (``core.json_schemas``)."""

from __future__ import annotations

import pytest

from core.domain import Tool
from core.json_schemas import check_schema, errors

CATASTROPHIC = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}


def test_a_catastrophic_pattern_is_evaluated_in_linear_time() -> None:
    # Python's re takes minutes on this input; RE2 answers at once (no timing asserted: the
    # test would simply not finish on a backtracking engine).
    found = errors(CATASTROPHIC, {"q": "a" * 5000 + "!"})
    assert len(found) == 1 and "does not match" in found[0].message
    assert errors(CATASTROPHIC, {"q": "aaaa"}) == []


@pytest.mark.parametrize(
    ("schema", "place"),
    [
        ({"type": "string", "pattern": r"(a)\1"}, "input_schema/pattern"),
        ({"properties": {"x": {"pattern": "(?=a)a"}}}, "input_schema/properties/x/pattern"),
        ({"patternProperties": {"(?<!b)a": {}}}, "input_schema/patternProperties/(?<!b)a"),
        ({"pattern": "a" * 1001}, "input_schema/pattern"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_their_place(
    schema: dict[str, object], place: str
) -> None:
    with pytest.raises(ValueError, match="linear time") as refused:
        check_schema(schema)
    assert place in str(refused.value)


def test_values_that_merely_look_like_patterns_are_not_checked() -> None:
    check_schema({"type": "object", "default": {"pattern": r"(a)\1"}, "enum": [{"pattern": "("}]})


def test_pattern_properties_match_with_re2() -> None:
    schema = {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}}
    assert errors(schema, {"x_a": 1, "y": "s"}) == []
    assert len(errors(schema, {"x_a": "s"})) == 1


def test_a_tool_with_a_backreference_in_its_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="RE2"):
        Tool.model_validate(
            {
                "id": "t",
                "name": "t",
                "description": "t",
                "target_type": "task",
                "target_id": "x",
                "input_schema": {"type": "object", "properties": {"s": {"pattern": r"(.)\1"}}},
            }
        )
