"""Workflow definitions: validation, references, conditions (core/workflows.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from core.workflows import (
    Compare,
    NotOf,
    WorkflowDef,
    WorkflowGraph,
    apply_mapping,
    evaluate,
    resolve_ref,
)

LIBRARY = Path(__file__).resolve().parents[2] / "library" / "workflows"


def definition(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "wf",
        "nodes": [
            {"id": "a", "kind": "task", "target_id": "t"},
            {"id": "b", "kind": "pass", "join": {"mode": "all"}},
        ],
        "edges": [{"from": "a", "to": "b", "foreach": "output.items"}],
    }
    return {**base, **changes}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("duplicate node", definition(nodes=[{"id": "a", "kind": "pass"}] * 2, edges=[]), "unique"),
    ("unknown edge end", definition(edges=[{"from": "a", "to": "zz"}]), "unknown node"),
    (
        "no start",
        definition(edges=[{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]),
        "no start node",
    ),
    (
        "bad ref root",
        definition(edges=[{"from": "a", "to": "b", "foreach": "os.environ"}]),
        "not a reference",
    ),
    ("bad condition", definition(edges=[{"from": "a", "to": "b", "when": "1 +"}]), "parse"),
    (
        "task without target",
        definition(nodes=[{"id": "a", "kind": "task"}], edges=[]),
        "needs target_id",
    ),
    (
        "pass with target",
        definition(nodes=[{"id": "a", "kind": "pass", "target_id": "x"}], edges=[]),
        "no target",
    ),
    (
        "n without n",
        definition(nodes=[{"id": "a", "kind": "pass", "join": {"mode": "n"}}], edges=[]),
        "join.n",
    ),
    (
        "otherwise with when",
        definition(edges=[{"from": "a", "to": "b", "otherwise": True, "when": "output.x"}]),
        "otherwise",
    ),
    ("unknown field", definition(colour="red"), "Extra inputs"),
    ("bad node id", definition(nodes=[{"id": "a.b", "kind": "pass"}], edges=[]), "pattern"),
]


@pytest.mark.parametrize(("case", "body", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_definitions_are_rejected(case: str, body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        WorkflowDef.model_validate(body)


def test_definition_round_trips_through_json_with_aliases() -> None:
    wf = WorkflowDef.model_validate(
        definition(
            edges=[{"from": "a", "to": "b", "when": "not output.x >= 2", "foreach": "output.items"}]
        )
    )
    again = WorkflowDef.model_validate_json(wf.model_dump_json(by_alias=True))
    assert again == wf
    assert isinstance(again.edges[0].when, NotOf)
    assert again.edges[0].when.not_ == Compare(ref="output.x", op="ge", value=2)


SCOPE = {"input": {"a": {"b": [10, 20, {"c": "deep"}]}, "s": "x"}, "item": None}
REFS: list[tuple[str, Any]] = [
    ("input.a.b.0", 10),
    ("input.a.b.-1.c", "deep"),
    ("input.a.b.9", None),
    ("input.s.nope", None),
    ("item.anything", None),
    ("input.a.b", [10, 20, {"c": "deep"}]),
]


@pytest.mark.parametrize(("path", "expected"), REFS)
def test_resolve_ref(path: str, expected: Any) -> None:
    assert resolve_ref(path, SCOPE) == expected


def test_mapping_templates_keep_types_only_when_whole() -> None:
    wf = WorkflowDef.model_validate(
        definition(
            output_mapping={
                "list": "{{input.a.b}}",
                "text": "n={{input.a.b.0}} {{input.a}}",
                "lit": {"const": [1]},
                "ref": "input.s",
            }
        )
    )
    assert wf.output_mapping is not None
    assert apply_mapping(wf.output_mapping, SCOPE) == {
        "list": [10, 20, {"c": "deep"}],
        "text": 'n=10 {"b": [10, 20, {"c": "deep"}]}',
        "lit": [1],
        "ref": "x",
    }


CONDITIONS: list[tuple[Any, bool]] = [
    ("input.s == 'x'", True),
    ('input.s == "x"', True),
    ("input.s != x", False),  # a bare word is a string
    ("input.a.b.0 < 11", True),
    ("input.a.b.0 > true", False),  # bool vs number never orders
    ("input.a.b contains 20", True),
    ("input.s in ['x', 'y']", True),
    ("input.s in 'xyz'", True),  # substring
    ('input.s in ["x", "y"]', True),
    ('input.s not in ["y"]', True),
    ("input.missing", False),
    ("not input.missing", True),
    ({"ref": "input.missing", "op": "exists"}, False),
    ({"any": [{"ref": "input.s", "op": "eq", "value": "q"}, "input.a"]}, True),
]


@pytest.mark.parametrize(("condition", "expected"), CONDITIONS)
def test_conditions(condition: Any, expected: bool) -> None:
    wf = WorkflowDef.model_validate(definition(edges=[{"from": "a", "to": "b", "when": condition}]))
    when = wf.edges[0].when
    assert when is not None
    assert evaluate(when, SCOPE) is expected


def test_closing_join_skips_nested_fan_outs() -> None:
    wf = WorkflowDef.model_validate(
        {
            "id": "nested",
            "nodes": [{"id": n, "kind": "pass"} for n in ("o", "i", "leaf")]
            + [
                {"id": "ji", "kind": "pass", "join": {"mode": "all"}},
                {"id": "jo", "kind": "pass", "join": {"mode": "all"}},
            ],
            "edges": [
                {"from": "o", "to": "i", "foreach": "output.xs"},
                {"from": "i", "to": "leaf", "foreach": "output.ys"},
                {"from": "leaf", "to": "ji"},
                {"from": "ji", "to": "jo"},
            ],
        }
    )
    graph = WorkflowGraph(wf)
    assert graph.closing_join("i") == "jo"
    assert graph.closing_join("leaf") == "ji"


@pytest.mark.parametrize("path", sorted(LIBRARY.glob("*.yaml")), ids=lambda p: p.name)
def test_library_workflows_validate(path: Path) -> None:
    WorkflowDef.model_validate(yaml.safe_load(path.read_text()))


def test_library_workflow_targets_exist_in_the_library() -> None:
    tasks = {p.stem for p in (LIBRARY.parent / "tasks").glob("*.yaml")}
    workflows = {p.stem for p in LIBRARY.glob("*.yaml")}
    for path in LIBRARY.glob("*.yaml"):
        wf = WorkflowDef.model_validate(yaml.safe_load(path.read_text()))
        assert wf.id == path.stem
        for node in wf.nodes:
            known = {"task": tasks, "subworkflow": workflows}.get(node.kind)
            if known is not None:
                assert node.target_id in known, f"{path.name}: {node.id} -> {node.target_id}"
