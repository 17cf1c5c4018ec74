"""Workflow definitions: versioned graphs of task / subworkflow / agent nodes (library objects).

A workflow is a directed graph. A *token* walks it: a node runs once per token that reaches it
(``task`` on the executor, ``subworkflow`` in a child coordinator, ``agent`` as a turn of a
conversation, ``pass`` forwards its mapped input). When a node finishes, its outgoing edges are
tested in order; each matching edge moves the token on. An edge with ``foreach`` spawns one token
per item of a list (fan-out); several matching edges split the token the same way. A node with a
``join`` collects the tokens of the innermost fan-out that reach it (all / any / n) and continues
with one token whose ``branches`` hold their outputs (fan-in).

Values flow by *references*, dotted paths into a scope (``input.topic``, ``nodes.plan.queries``,
``item``, ``branches``, ``output.score``; integers index lists). A mapping value is a reference, a
``{{ref}}`` template string, or ``{"const": value}``. Conditions are JSON-logic-like comparisons
(``{"ref": "output.score", "op": "gt", "value": 0.5}``, ``{"all": [...]}``, ``{"any": [...]}``,
``{"not": ...}``) or the one-comparison shorthand ``"output.score > 0.5"``. Nothing is ``eval``-ed.

This module is pure (pydantic and the standard library): planning and the REST layer share it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from core.domain import LibraryId
from core.json_schemas import check_schema
from core.jsontypes import JsonObject

NODE_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
NodeId = Annotated[str, Field(pattern=NODE_ID_PATTERN)]
REF_ROOTS = ("input", "nodes", "previous", "item", "index", "branches", "output", "run_id")
REF_PATTERN = rf"^(?:{'|'.join(REF_ROOTS)})(?:\.[A-Za-z0-9_-]+)*$"
"""A reference, as the published schema says it (``_check_ref`` says why one is refused)."""
MAPPING_TEXT_PATTERN = rf"^(?:(?:{'|'.join(REF_ROOTS)})(?:\.[A-Za-z0-9_-]+)*|[\s\S]*\{{\{{[\s\S]*)$"
"""A mapping value that is text: a reference, or a template (it holds ``{{``)."""
Ref = Annotated[str, Field(pattern=REF_PATTERN)]
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --------------------------------------------------------------------------- references


def _check_ref(value: str) -> str:
    if not _REF.match(value) or value.split(".", 1)[0] not in REF_ROOTS:
        raise ValueError(f"{value!r} is not a reference (roots: {', '.join(REF_ROOTS)})")
    return value


def resolve_ref(path: str, scope: Mapping[str, Any]) -> Any:
    """The value at dotted ``path`` in ``scope``; ``None`` when any step is missing."""
    current: Any = scope
    for part in path.split("."):
        if isinstance(current, Mapping):
            current = current.get(part)
        elif isinstance(current, list | tuple) and _is_index(part):
            index = int(part)
            current = current[index] if -len(current) <= index < len(current) else None
        else:
            return None
        if current is None:
            return None
    return current


def _is_index(part: str) -> bool:
    return part.lstrip("-").isdigit()


def render_template(text: str, scope: Mapping[str, Any]) -> Any:
    """Fill ``{{ref}}`` placeholders; a string that is one whole placeholder keeps its type."""
    whole = _TEMPLATE.fullmatch(text.strip())
    if whole:
        return resolve_ref(whole.group(1), scope)
    return _TEMPLATE.sub(lambda m: _as_text(resolve_ref(m.group(1), scope)), text)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


class Const(_Model):
    """A literal mapping value: ``{"const": ...}``."""

    const: Any


def _check_mapping_value(value: Any) -> Any:
    if isinstance(value, str) and "{{" not in value:
        _check_ref(value)
    return value


MappingValue = Annotated[
    Annotated[str, Field(pattern=MAPPING_TEXT_PATTERN)] | Const,
    BeforeValidator(_check_mapping_value),
]
Mapping_ = dict[Annotated[str, Field(min_length=1, max_length=100)], MappingValue]


def apply_mapping(mapping: Mapping_, scope: Mapping[str, Any]) -> JsonObject:
    """Build an object from ``mapping``: each value is a reference, a template, or a constant."""
    out: JsonObject = {}
    for key, value in mapping.items():
        if isinstance(value, Const):
            out[key] = value.const
        elif "{{" in value:
            out[key] = render_template(value, scope)
        else:
            out[key] = resolve_ref(value, scope)
    return out


# --------------------------------------------------------------------------- conditions

CompareOp = Literal[
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "in",
    "not_in",
    "contains",
    "exists",
    "truthy",
    "falsy",
    "empty",
    "not_empty",
]
_SYMBOLS: dict[str, CompareOp] = {
    "==": "eq",
    "!=": "ne",
    "<": "lt",
    "<=": "le",
    ">": "gt",
    ">=": "ge",
    "in": "in",
    "not in": "not_in",
    "contains": "contains",
}
_SHORTHAND = re.compile(
    r"^\s*(?P<neg>not\s+)?(?P<ref>[A-Za-z_][A-Za-z0-9_.-]*)\s*"
    r"(?:(?P<op>==|!=|<=|>=|<|>|not\s+in|in|contains)\s*(?P<value>.+?))?\s*$"
)


class Compare(_Model):
    """``ref`` compared with ``value`` (a literal) or ``value_ref`` (another reference)."""

    ref: Ref
    op: CompareOp = "truthy"
    value: Any = None
    value_ref: Ref | None = None

    @field_validator("ref", "value_ref", mode="before")
    @classmethod
    def _refs_ok(cls, value: Any) -> Any:
        return _check_ref(value) if isinstance(value, str) else value


class AllOf(_Model):
    all: list[Condition] = Field(min_length=1, max_length=50)


class AnyOf(_Model):
    any: list[Condition] = Field(min_length=1, max_length=50)


class NotOf(_Model):
    not_: Condition = Field(alias="not")


def _parse_shorthand(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    found = _SHORTHAND.match(value)
    if found is None:
        raise ValueError(f"cannot parse {value!r}; use 'ref', 'not ref' or 'ref OP value'")
    compare: JsonObject = {"ref": found["ref"]}
    if found["op"]:
        compare["op"] = _SYMBOLS[" ".join(found["op"].split())]
        compare["value"] = _parse_literal(found["value"])
    if found["neg"]:
        return {"not": compare}
    return compare


def _parse_literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if text.startswith("[") and text.endswith("]"):  # a flat list with 'single quotes'
        return [_parse_literal(part) for part in text[1:-1].split(",") if part.strip()]
    return text  # a bare word compares as a string


Condition = Annotated[Compare | AllOf | AnyOf | NotOf, BeforeValidator(_parse_shorthand)]


def evaluate(condition: Compare | AllOf | AnyOf | NotOf, scope: Mapping[str, Any]) -> bool:
    """Whether ``condition`` holds in ``scope`` (type mismatches are simply false)."""
    match condition:
        case AllOf():
            return all(evaluate(c, scope) for c in condition.all)
        case AnyOf():
            return any(evaluate(c, scope) for c in condition.any)
        case NotOf():
            return not evaluate(condition.not_, scope)
        case Compare():
            left = resolve_ref(condition.ref, scope)
            right = (
                resolve_ref(condition.value_ref, scope)
                if condition.value_ref is not None
                else condition.value
            )
            return _compare(condition.op, left, right)


def _compare(op: CompareOp, left: Any, right: Any) -> bool:
    try:
        return bool(_COMPARE[op](left, right))
    except TypeError:
        return False


def _ordered(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], bool]:
    def check(a: Any, b: Any) -> bool:
        if a is None or b is None or isinstance(a, bool) != isinstance(b, bool):
            return False
        if isinstance(a, float) and math.isnan(a):
            return False
        return bool(fn(a, b))

    return check


def _contains(container: Any, item: Any) -> bool:
    return isinstance(container, str | list | tuple | dict) and item in container


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": _ordered(lambda a, b: a < b),
    "le": _ordered(lambda a, b: a <= b),
    "gt": _ordered(lambda a, b: a > b),
    "ge": _ordered(lambda a, b: a >= b),
    "in": lambda a, b: _contains(b, a),
    "not_in": lambda a, b: not _contains(b, a),
    "contains": _contains,
    "exists": lambda a, _b: a is not None,
    "truthy": lambda a, _b: bool(a),
    "falsy": lambda a, _b: not a,
    "empty": lambda a, _b: a is None or (hasattr(a, "__len__") and len(a) == 0),
    "not_empty": lambda a, _b: a is not None and (not hasattr(a, "__len__") or len(a) > 0),
}


# --------------------------------------------------------------------------- the graph


class Join(_Model):
    """Fan-in: wait for ``all`` branches, the first (``any``), or the first ``n``."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["mode"], "properties": {"mode": {"const": "n"}}},
            "then": {"required": ["n"], "properties": {"n": {"type": "integer"}}},
            "else": {"properties": {"n": {"type": "null"}}},
        }
    )

    mode: Literal["all", "any", "n"] = "all"
    n: int | None = Field(None, ge=1, le=100_000)

    @model_validator(mode="after")
    def _n_for_mode_n(self) -> Join:
        if (self.mode == "n") != (self.n is not None):
            raise ValueError("join.n is required for mode 'n' and only for it")
        return self


class NodeRetry(_Model):
    """Retries of infrastructure failures (business failures never retry)."""

    max_attempts: int = Field(1, ge=1, le=10)
    backoff_ms: int = Field(200, ge=0, le=60_000)


NodeKind = Literal["task", "subworkflow", "agent", "pass"]


class Node(_Model):
    """One step of the graph.

    ``target_id`` names the task, the workflow, or the agent. An agent node runs one turn of that
    agent in a fresh child conversation (``delegate``: clean context), or, with ``target_ref``, in
    the conversation whose id the reference gives (that conversation's agent answers).
    """

    # Which targets each kind takes (``_target_for_kind``), as the published schema says it.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"kind": {"const": "pass"}}},
                    "then": {
                        "properties": {
                            "target_id": {"type": "null"},
                            "target_ref": {"type": "null"},
                        }
                    },
                },
                {
                    "if": {"properties": {"kind": {"enum": ["task", "subworkflow"]}}},
                    "then": {
                        "required": ["target_id"],
                        "properties": {
                            "target_id": {"type": "string"},
                            "target_ref": {"type": "null"},
                        },
                    },
                },
                {
                    "if": {"properties": {"kind": {"const": "agent"}}},
                    "then": {
                        "anyOf": [
                            {
                                "required": ["target_id"],
                                "properties": {"target_id": {"type": "string"}},
                            },
                            {
                                "required": ["target_ref"],
                                "properties": {"target_ref": {"type": "string"}},
                            },
                        ]
                    },
                },
            ]
        }
    )

    id: NodeId
    kind: NodeKind
    description: str = Field("", max_length=2000)
    target_id: str | None = Field(None, min_length=1, max_length=200)
    target_version: int | None = Field(None, ge=1)
    target_ref: Ref | None = None
    mode: Literal["delegate", "loop_in"] = "delegate"
    input_mapping: Mapping_ | None = None
    output_mapping: Mapping_ | None = None
    join: Join | None = None
    retry: NodeRetry = Field(default_factory=NodeRetry)
    timeout_s: float | None = Field(None, gt=0, le=86_400)
    on_failure: Literal["fail_run", "drop"] = "fail_run"

    @field_validator("target_ref", mode="before")
    @classmethod
    def _target_ref_ok(cls, value: Any) -> Any:
        return _check_ref(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _target_for_kind(self) -> Node:
        if self.kind == "pass":
            if self.target_id or self.target_ref:
                raise ValueError(f"node {self.id}: a pass node has no target")
        elif self.kind == "agent":
            if not (self.target_id or self.target_ref):
                raise ValueError(f"node {self.id}: an agent node needs target_id or target_ref")
        elif not self.target_id:
            raise ValueError(f"node {self.id}: a {self.kind} node needs target_id")
        if self.target_ref and self.kind != "agent":
            raise ValueError(f"node {self.id}: target_ref is only for agent nodes")
        return self


class Edge(_Model):
    """``from`` → ``to`` when ``when`` holds (or, ``otherwise``, when no sibling edge matched)."""

    model_config = ConfigDict(
        json_schema_extra={  # ``otherwise`` takes no condition
            "not": {
                "required": ["otherwise", "when"],
                "properties": {"otherwise": {"const": True}, "when": {"not": {"type": "null"}}},
            }
        }
    )

    source: NodeId = Field(alias="from")
    to: NodeId
    when: Condition | None = None
    otherwise: bool = False
    foreach: Ref | None = Field(None, description="A reference to a list: one token per item")

    @field_validator("foreach", mode="before")
    @classmethod
    def _foreach_ok(cls, value: Any) -> Any:
        return _check_ref(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _otherwise_alone(self) -> Edge:
        if self.otherwise and self.when is not None:
            raise ValueError(f"edge {self.source}->{self.to}: 'otherwise' takes no condition")
        return self


class WorkflowDef(_Model):
    """A versioned workflow graph (library kind ``workflow``)."""

    id: LibraryId
    version: int = 0
    description: str = Field("", max_length=2000)
    input_schema: JsonObject | None = None
    start: list[NodeId] | None = Field(
        None, min_length=1, description="Default: nodes without incoming edges"
    )
    nodes: list[Node] = Field(min_length=1, max_length=1000)
    edges: list[Edge] = Field(default_factory=list, max_length=5000)
    output_mapping: Mapping_ | None = None
    max_tokens: int = Field(10_000, ge=1, le=1_000_000, description="Guard against runaway loops")

    @field_validator("input_schema")
    @classmethod
    def _schema_ok(cls, value: JsonObject | None) -> JsonObject | None:
        if value is None:
            return None
        check_schema(value)  # a valid schema whose patterns run in linear time
        return value

    @model_validator(mode="after")
    def _graph_ok(self) -> WorkflowDef:
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("node ids must be unique")
        known = set(ids)
        for edge in self.edges:
            for end in (edge.source, edge.to):
                if end not in known:
                    raise ValueError(f"edge {edge.source}->{edge.to}: unknown node {end!r}")
        if self.start is not None:
            unknown = [s for s in self.start if s not in known]
            if unknown or not self.start:
                raise ValueError(f"start must name existing nodes (unknown: {unknown})")
        if not self.start_nodes():
            raise ValueError("no start node: name one in 'start' (every node has incoming edges)")
        return self

    def start_nodes(self) -> list[str]:
        if self.start is not None:
            return list(self.start)
        targets = {e.to for e in self.edges}
        return [n.id for n in self.nodes if n.id not in targets]


class WorkflowGraph:
    """Indexed, read-only view of a ``WorkflowDef`` for traversal (kept off the pydantic model so
    caches never take part in model equality)."""

    __slots__ = ("_closing_join", "_nodes", "_outgoing", "definition")

    def __init__(self, definition: WorkflowDef) -> None:
        self.definition = definition
        self._nodes = {n.id: n for n in definition.nodes}
        self._outgoing: dict[str, list[Edge]] = {n.id: [] for n in definition.nodes}
        for edge in definition.edges:
            self._outgoing[edge.source].append(edge)
        self._closing_join: dict[str, str | None] = {}

    def node(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def outgoing(self, node_id: str) -> list[Edge]:
        return self._outgoing[node_id]

    def closing_join(self, first: str) -> str | None:
        """The join node that closes a fan-out whose branches start at node ``first``.

        A static guess: walk forward counting fan-outs (+1) and joins (-1); the join reached at
        depth 0 closes it. Used only when no branch reaches a join (empty or filtered fan-outs).
        """
        if first not in self._closing_join:
            self._closing_join[first] = self._find_closing_join(first)
        return self._closing_join[first]

    def _find_closing_join(self, first: str) -> str | None:
        frontier: list[tuple[str, int]] = [(first, 1)]
        seen: set[tuple[str, int]] = set()
        while frontier:
            node_id, depth = frontier.pop(0)
            if (node_id, depth) in seen or depth > 50:
                continue
            seen.add((node_id, depth))
            if self._nodes[node_id].join is not None:
                depth -= 1
                if depth == 0:
                    return node_id
            for edge in self._outgoing[node_id]:
                frontier.append((edge.to, depth + (1 if edge.foreach else 0)))
        return None


# --------------------------------------------------------------------------- runs (stored records)


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class ConversationParent(_Model):
    """A run started by a conversation's tool call (its actor forwards the run's events)."""

    type: Literal["conversation"] = "conversation"
    conversation_id: str
    turn_id: str | None = None
    agent_id: str | None = None
    tool_call_id: str | None = None


class WorkflowParent(_Model):
    """A run started by a subworkflow node of another run."""

    type: Literal["workflow"] = "workflow"
    run_id: str
    token_id: str


RunParent = Annotated[ConversationParent | WorkflowParent, Field(discriminator="type")]


class RunContext(_Model):
    """Where a run works: handed to its tasks' actions and inherited by its subworkflows.

    ``project_id`` and ``branch``: the run's working branch (``core.projects``): its own
    ``wonder/run-<run_id>`` when started with a project, its conversation's when a conversation
    started it. Its agent nodes work on it too.
    """

    conversation_id: str | None = None
    agent_id: str | None = None
    turn_id: str | None = None
    project_id: str | None = None
    branch: str | None = None


class RunError(_Model):
    """Why a run or a node failed (``code`` is an ``ErrorCode`` value)."""

    code: str
    message: str
    retriable: bool = False
    node_id: str | None = None
    token_id: str | None = None


class RunEvent(_Model):
    """``workflow_started`` / ``workflow_completed`` / ``workflow_failed``, kept on the run."""

    type: str
    at: datetime
    payload: JsonObject = Field(default_factory=dict)


class RerunOrigin(_Model):
    """A re-run's origin: the run it re-runs from ``node_id`` on. The nodes that ``node_id``
    cannot reach took that run's recorded outputs; ``node_input`` replaced the input of
    ``node_id``'s visits when given."""

    run_id: str
    node_id: str
    node_input: JsonObject | None = None


class WorkflowRun(_Model):
    id: str
    workflow_id: str
    workflow_version: int
    status: RunStatus = RunStatus.PENDING
    input: JsonObject = Field(default_factory=dict)
    output: Any = None
    error: RunError | None = None
    parent: RunParent | None = None
    client_id: str | None = None
    context: RunContext = Field(default_factory=RunContext)
    depth: int = 0
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    events: list[RunEvent] = Field(default_factory=list)
    trace: str | None = Field(
        None, description="W3C traceparent of the span that started the run (its trace)"
    )
    rerun_of: RerunOrigin | None = Field(
        None, description="A re-run from a node: the run it re-runs and the node"
    )


class JoinProgress(_Model):
    """How one join collecting a fan-out stands: the branches arrived so far (index → output;
    emptied once it fired)."""

    node_id: str
    arrivals: dict[int, Any] = Field(default_factory=dict)
    fired: bool = False


class FanOut(_Model):
    """The fan-out a token started when it finished: its group of branches and its joins."""

    group_id: str
    size: int
    join_node_id: str | None = None
    joins: list[JoinProgress] = Field(default_factory=list)


class NodeRecord(_Model):
    """One token's visit to one node: the run's node history.

    Everything the coordinator's planning knows about the token is here (its fan-out item and
    index, a join's branches, the fan-out it started), so a re-created coordinator rebuilds the
    run from these records (docs/internals/workflows.md, "A coordinator that dies").
    """

    run_id: str
    token_id: str
    seq: int
    node_id: str
    kind: NodeKind
    state: str
    parent_token_id: str | None = None
    branch: list[tuple[str, int]] = Field(default_factory=list)
    attempt: int = 0
    input: Any = None
    output: Any = None
    error: RunError | None = None
    child_run_id: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    item: Any = None
    index: int | None = None
    from_foreach: bool = False
    branches: list[Any] | None = Field(None, description="A join token: the joined outputs")
    fanout: FanOut | None = Field(None, description="The fan-out this token started")
    reused_from: str | None = Field(
        None,
        description="A re-run's node that did not run again: the token of the re-run run whose "
        "recorded output it took",
    )


for _model in (AllOf, AnyOf, NotOf, Edge):
    _model.model_rebuild()
