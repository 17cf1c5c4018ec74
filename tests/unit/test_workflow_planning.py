"""Table-driven tests of the coordinator's pure planning: ``(state, event) -> decisions``."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from actors.workflow_coordinator.domain import (
    CallAgent,
    CancelToken,
    CompleteRun,
    CreateToken,
    Decision,
    DispatchTask,
    FailRun,
    NodeError,
    NodeFailed,
    NodeSucceeded,
    RunCancelled,
    RunStarted,
    RunState,
    StartRun,
    StartSubworkflow,
    TokenState,
    WorkflowEvent,
)
from actors.workflow_coordinator.planning import apply, plan
from core.workflows import RunStatus, WorkflowDef

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Dispatch = DispatchTask | StartSubworkflow | CallAgent
Outcome = Any | NodeError  # what a dispatched node returns (an output, or an error)


def workflow(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]] | None = None, **extra: Any
) -> WorkflowDef:
    return WorkflowDef.model_validate({"id": "wf", "nodes": nodes, "edges": edges or [], **extra})


def task(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "task", "target_id": extra.pop("target", node_id), **extra}


@dataclass
class Sim:
    """Feeds events to ``plan`` and applies its decisions, like the actor does."""

    state: RunState
    decisions: list[Decision] = field(default_factory=list)
    pending: deque[Dispatch] = field(default_factory=deque)
    clock: int = 0

    @classmethod
    def start(cls, definition: WorkflowDef, run_input: dict[str, Any] | None = None) -> Sim:
        sim = cls(RunState.new("run1", definition, run_input or {}))
        sim.feed(RunStarted(sim.now()))
        return sim

    def now(self) -> datetime:
        self.clock += 1
        return T0 + timedelta(milliseconds=self.clock)

    def feed(self, event: WorkflowEvent) -> list[Decision]:
        before = self.state.copy()
        decisions = plan(self.state, event)
        assert _tokens_equal(before, self.state), "plan must not change its input state"
        for decision in decisions:
            apply(self.state, decision)
            if isinstance(decision, DispatchTask | StartSubworkflow | CallAgent):
                self.pending.append(decision)
        self.decisions.extend(decisions)
        return decisions

    def reply(self, dispatch: Dispatch, outcome: Outcome) -> list[Decision]:
        if isinstance(outcome, NodeError):
            return self.feed(NodeFailed(dispatch.token_id, outcome, self.now()))
        return self.feed(NodeSucceeded(dispatch.token_id, outcome, self.now()))

    def run(self, worker: Callable[[Dispatch], Outcome], *, lifo: bool = False) -> Sim:
        """Answer every dispatch with ``worker`` until the run ends (``lifo``: newest first)."""
        while self.pending and not self.state.status.terminal:
            dispatch = self.pending.pop() if lifo else self.pending.popleft()
            if self.state.tokens[dispatch.token_id].state.live:
                self.reply(dispatch, worker(dispatch))
        return self

    def node_of(self, dispatch: Dispatch) -> str:
        return self.state.tokens[dispatch.token_id].node_id


def _tokens_equal(a: RunState, b: RunState) -> bool:
    return a.tokens == b.tokens and a.status == b.status and a.live == b.live


def of(kind: type, decisions: list[Decision]) -> list[Any]:
    return [d for d in decisions if isinstance(d, kind)]


# --------------------------------------------------------------------------- purity


def test_planning_imports_no_effectful_libraries() -> None:
    code = (
        "import sys, actors.workflow_coordinator.planning, actors.workflow_coordinator.domain;"
        "print(','.join(m for m in ('ray','sqlalchemy','httpx','lancedb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------- linear


def add_one(dispatch: Dispatch) -> Outcome:
    return {"n": dispatch.input["n"] + 1}


def test_start_creates_and_dispatches_the_start_token() -> None:
    sim = Sim.start(workflow([task("a"), task("b")], [{"from": "a", "to": "b"}]), {"n": 1})
    kinds = [type(d) for d in sim.decisions]
    assert kinds == [StartRun, CreateToken, DispatchTask]
    dispatch = sim.decisions[2]
    assert isinstance(dispatch, DispatchTask)
    assert (dispatch.token_id, dispatch.task_id, dispatch.input, dispatch.attempt) == (
        "t1",
        "a",
        {"n": 1},
        1,
    )
    assert sim.state.tokens["t1"].state is TokenState.WAITING_FOR_TASK


def test_linear_chain_passes_outputs_along() -> None:
    chain = workflow(
        [task("a"), task("b"), task("c")], [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]
    )
    sim = Sim.start(chain, {"n": 0}).run(add_one)
    assert sim.state.status is RunStatus.COMPLETED
    assert sim.state.output == {"n": 3}
    assert [t.node_id for t in sim.state.tokens.values()] == ["a", "b", "c"]
    assert [t.parent_id for t in sim.state.tokens.values()] == [None, "t1", "t2"]


def test_mappings_references_templates_and_constants() -> None:
    definition = workflow(
        [
            task(
                "a",
                input_mapping={"topic": "input.topic", "k": {"const": 3}},
                output_mapping={"words": "output.words", "echo": "output.topic"},
            ),
            task(
                "b",
                input_mapping={
                    "prompt": "About {{input.topic}}: {{nodes.a.words}}",
                    "first": "nodes.a.words.0",
                    "prev": "previous.echo",
                },
            ),
        ],
        [{"from": "a", "to": "b"}],
        output_mapping={"answer": "nodes.b.text", "topic": "input.topic", "a": "nodes.a"},
    )

    def worker(d: Dispatch) -> Outcome:
        if d.input.get("k") == 3:
            return {"words": ["x", "y"], "topic": d.input["topic"], "extra": 1}
        return {"text": f"{d.input['prompt']}|{d.input['first']}|{d.input['prev']}"}

    sim = Sim.start(definition, {"topic": "owls"}).run(worker)
    assert sim.state.output == {
        "answer": 'About owls: ["x", "y"]|x|owls',
        "topic": "owls",
        "a": {"words": ["x", "y"], "echo": "owls"},
    }


# --------------------------------------------------------------------------- conditions

ROUTER_EDGES: list[tuple[str, dict[str, Any], str]] = [
    # (case, the edge from a to "hi" (a to "lo" is 'otherwise'), score: expected node)
    ("json gt", {"when": {"ref": "output.score", "op": "gt", "value": 0.5}}, "hi"),
    ("shorthand >=", {"when": "output.score >= 0.9"}, "hi"),
    ("shorthand string", {"when": "output.label == 'good'"}, "hi"),
    ("shorthand in", {"when": 'output.label in ["good", "fine"]'}, "hi"),
    ("all", {"when": {"all": ["output.score > 0.5", "output.label == 'good'"]}}, "hi"),
    ("any", {"when": {"any": ["output.score > 2", "output.label == 'bad'"]}}, "lo"),
    ("not", {"when": {"not": "output.score < 0.5"}}, "hi"),
    ("not shorthand", {"when": "not output.ok"}, "lo"),
    ("value_ref", {"when": {"ref": "output.score", "op": "gt", "value_ref": "input.bar"}}, "hi"),
    ("type mismatch is false", {"when": "output.label > 3"}, "lo"),
    ("missing is false", {"when": "output.nope.deeper == 1"}, "lo"),
    ("contains", {"when": "output.tags contains 'x'"}, "hi"),
    ("empty", {"when": {"ref": "output.none", "op": "empty"}}, "hi"),
]


@pytest.mark.parametrize(
    ("case", "edge", "expected"), ROUTER_EDGES, ids=[c[0] for c in ROUTER_EDGES]
)
def test_condition_routes(case: str, edge: dict[str, Any], expected: str) -> None:
    definition = workflow(
        [task("a"), task("hi"), task("lo")],
        [{"from": "a", "to": "hi", **edge}, {"from": "a", "to": "lo", "otherwise": True}],
    )
    result = {"score": 0.9, "label": "good", "ok": True, "tags": ["x"], "none": []}
    sim = Sim.start(definition, {"bar": 0.3}).run(
        lambda d: result if d.task_id == "a" else {"at": d.task_id}
    )
    assert sim.state.output == {"at": expected}


def test_several_matching_edges_run_in_parallel() -> None:
    definition = workflow(
        [task("a"), task("b"), task("c")], [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}]
    )
    sim = Sim.start(definition)
    decisions = sim.reply(sim.pending.popleft(), {"x": 1})
    assert sorted(d.task_id for d in of(DispatchTask, decisions)) == ["b", "c"]
    sim.run(lambda d: {"at": d.task_id})
    assert sim.state.output == {"b": {"at": "b"}, "c": {"at": "c"}}


def test_no_matching_edge_ends_the_branch_and_the_run() -> None:
    definition = workflow([task("a"), task("b")], [{"from": "a", "to": "b", "when": "output.go"}])
    sim = Sim.start(definition).run(lambda d: {"go": False})
    assert sim.state.status is RunStatus.COMPLETED
    assert sim.state.output is None  # a dead end is not a leaf


def test_loop_until_condition_with_nearest_node_output() -> None:
    definition = workflow(
        [task("inc", input_mapping={"n": "previous.n"}), task("init")],
        [{"from": "init", "to": "inc"}, {"from": "inc", "to": "inc", "when": "output.n < 5"}],
        start=["init"],
        output_mapping={"n": "nodes.inc.n"},
    )
    sim = Sim.start(definition).run(lambda d: {"n": 0} if d.task_id == "init" else add_one(d))
    assert sim.state.output == {"n": 5}


def test_max_tokens_stops_a_runaway_loop() -> None:
    definition = workflow([task("a")], [{"from": "a", "to": "a"}], start=["a"], max_tokens=4)
    sim = Sim.start(definition).run(lambda d: {})
    assert sim.state.status is RunStatus.FAILED
    assert sim.state.error is not None and "max_tokens" in sim.state.error.message


# --------------------------------------------------------------------------- fan-out / fan-in


def fan(join: dict[str, Any], *, width_ref: str = "output.items", **work: Any) -> WorkflowDef:
    return workflow(
        [
            task("plan"),
            task(
                "work",
                input_mapping={"q": "item", "i": "index", "topic": "nodes.plan.topic"},
                **work,
            ),
            {
                "id": "merge",
                "kind": "pass",
                "join": join,
                "input_mapping": {"results": "branches", "topic": "nodes.plan.topic"},
            },
        ],
        [{"from": "plan", "to": "work", "foreach": width_ref}, {"from": "work", "to": "merge"}],
    )


def planner_of(width: int) -> Callable[[Dispatch], Outcome]:
    def worker(d: Dispatch) -> Outcome:
        if d.task_id == "plan":
            return {"items": [f"q{i}" for i in range(width)], "topic": "t"}
        return {"answer": d.input["q"].upper(), "i": d.input["i"], "topic": d.input["topic"]}

    return worker


def test_fan_out_dispatches_every_branch_in_one_plan() -> None:
    sim = Sim.start(fan({"mode": "all"}), {})
    decisions = sim.reply(sim.pending.popleft(), planner_of(20)(_plan_dispatch()))
    dispatches = of(DispatchTask, decisions)
    assert len(dispatches) == 20
    assert [d.input["i"] for d in dispatches] == list(range(20))
    assert {sim.state.tokens[d.token_id].branch[0].group_id for d in dispatches} == {"g1"}


def _plan_dispatch() -> DispatchTask:
    return DispatchTask("t1", "plan", None, {}, 1)


FAN_IN_CASES: list[tuple[str, dict[str, Any], bool, int, int]] = [
    # (case, join, newest-first completion order, branches joined, cancelled stragglers)
    ("all in order", {"mode": "all"}, False, 20, 0),
    ("all reversed", {"mode": "all"}, True, 20, 0),
    ("any", {"mode": "any"}, False, 1, 19),
    ("n of 20", {"mode": "n", "n": 5}, True, 5, 15),
]


@pytest.mark.parametrize(
    ("case", "join", "lifo", "joined", "cancelled"), FAN_IN_CASES, ids=[c[0] for c in FAN_IN_CASES]
)
def test_fan_out_20_fan_in(
    case: str, join: dict[str, Any], lifo: bool, joined: int, cancelled: int
) -> None:
    sim = Sim.start(fan(join))
    sim.reply(sim.pending.popleft(), planner_of(20)(_plan_dispatch()))
    sim.run(planner_of(20), lifo=lifo)
    assert sim.state.status is RunStatus.COMPLETED
    results = sim.state.output["results"]
    assert len(results) == joined
    assert results == sorted(results, key=lambda r: r["i"])  # branch order, not arrival order
    assert sim.state.output["topic"] == "t"
    assert len(of(CancelToken, sim.decisions)) == cancelled
    assert not sim.state.live


def test_late_result_of_a_cancelled_branch_is_ignored() -> None:
    sim = Sim.start(fan({"mode": "any"}))
    sim.reply(sim.pending.popleft(), planner_of(3)(_plan_dispatch()))
    first, second = sim.pending.popleft(), sim.pending.popleft()
    sim.reply(first, {"answer": "A", "i": 0, "topic": "t"})
    assert sim.state.status is RunStatus.COMPLETED
    assert sim.reply(second, {"answer": "B", "i": 1, "topic": "t"}) == []


def test_empty_fan_out_fires_an_all_join_with_no_branches() -> None:
    sim = Sim.start(fan({"mode": "all"})).run(planner_of(0))
    assert sim.state.status is RunStatus.COMPLETED
    assert sim.state.output == {"results": [], "topic": "t"}


def test_empty_fan_out_cannot_satisfy_an_any_join() -> None:
    sim = Sim.start(fan({"mode": "any"})).run(planner_of(0))
    assert sim.state.status is RunStatus.FAILED


def test_foreach_over_a_non_list_fails_the_run() -> None:
    sim = Sim.start(fan({"mode": "all"}, width_ref="output.topic")).run(planner_of(2))
    assert sim.state.status is RunStatus.FAILED
    assert sim.state.error is not None and sim.state.error.code == "INVALID_INPUT"


def test_nested_fan_out_joins_innermost_first() -> None:
    definition = workflow(
        [
            task("outer"),
            task("inner"),
            task("leaf", input_mapping={"x": "item", "parent": "nodes.inner.name"}),
            {
                "id": "join_inner",
                "kind": "pass",
                "join": {"mode": "all"},
                "input_mapping": {"of": "nodes.inner.name", "xs": "branches"},
            },
            {"id": "join_outer", "kind": "pass", "join": {"mode": "all"}},
        ],
        [
            {"from": "outer", "to": "inner", "foreach": "output.names"},
            {"from": "inner", "to": "leaf", "foreach": "output.values"},
            {"from": "leaf", "to": "join_inner"},
            {"from": "join_inner", "to": "join_outer"},
        ],
    )

    def worker(d: Dispatch) -> Outcome:
        if d.task_id == "outer":
            return {"names": ["a", "b", "c"]}
        if d.task_id == "inner":
            return {"name": d.input["item"], "values": [1, 2]}
        return {"v": f"{d.input['parent']}{d.input['x']}"}

    sim = Sim.start(definition).run(worker, lifo=True)
    assert sim.state.output == {
        "branches": [{"of": name, "xs": [{"v": f"{name}1"}, {"v": f"{name}2"}]} for name in "abc"]
    }


def test_join_of_a_static_split() -> None:
    definition = workflow(
        [task("a"), task("b"), task("c"), {"id": "j", "kind": "pass", "join": {"mode": "all"}}],
        [
            {"from": "a", "to": "b"},
            {"from": "a", "to": "c"},
            {"from": "b", "to": "j"},
            {"from": "c", "to": "j"},
        ],
    )
    sim = Sim.start(definition).run(lambda d: {"at": d.task_id}, lifo=True)
    assert sim.state.output == {"branches": [{"at": "b"}, {"at": "c"}]}


# --------------------------------------------------------------------------- failures

BOOM = NodeError("EXECUTION_FAILED", "boom")
FLAKY = NodeError("TIMEOUT", "slow", retriable=True)


def test_business_failure_fails_the_run_and_cancels_the_rest() -> None:
    sim = Sim.start(fan({"mode": "all"}))
    sim.reply(sim.pending.popleft(), planner_of(20)(_plan_dispatch()))
    sim.reply(sim.pending.popleft(), {"answer": "A", "i": 0, "topic": "t"})
    decisions = sim.reply(sim.pending.popleft(), BOOM)
    failed = of(FailRun, decisions)
    assert len(failed) == 1 and failed[0].node_id == "work" and failed[0].token_id == "t3"
    assert len(of(CancelToken, decisions)) == 18
    assert sim.state.status is RunStatus.FAILED
    assert sim.state.error == BOOM
    assert not sim.state.live


RETRY_CASES: list[tuple[str, int, list[Outcome], RunStatus, list[int]]] = [
    # (case, max_attempts, outcomes in order, final status, delays of the re-dispatches)
    ("retried then ok", 3, [FLAKY, FLAKY, {"ok": 1}], RunStatus.COMPLETED, [100, 200]),
    ("retries exhausted", 2, [FLAKY, FLAKY], RunStatus.FAILED, [100]),
    ("business error never retries", 3, [BOOM], RunStatus.FAILED, []),
]


@pytest.mark.parametrize(
    ("case", "attempts", "outcomes", "status", "delays"),
    RETRY_CASES,
    ids=[c[0] for c in RETRY_CASES],
)
def test_retries(
    case: str, attempts: int, outcomes: list[Outcome], status: RunStatus, delays: list[int]
) -> None:
    definition = workflow([task("a", retry={"max_attempts": attempts, "backoff_ms": 100})])
    sim = Sim.start(definition)
    replies = iter(outcomes)
    sim.run(lambda _d: next(replies))
    assert sim.state.status is status
    redispatches = of(DispatchTask, sim.decisions)[1:]
    assert [d.delay_ms for d in redispatches] == delays
    assert [d.attempt for d in redispatches] == list(range(2, 2 + len(delays)))


def test_dropped_branch_failures_leave_the_join_to_the_rest() -> None:
    sim = Sim.start(fan({"mode": "all"}, on_failure="drop"))
    sim.reply(sim.pending.popleft(), planner_of(20)(_plan_dispatch()))
    sim.run(lambda d: BOOM if d.input["i"] % 4 == 0 else planner_of(20)(d))
    assert sim.state.status is RunStatus.COMPLETED
    assert [r["i"] for r in sim.state.output["results"]] == [i for i in range(20) if i % 4]


def test_n_join_that_cannot_be_met_fails_the_run() -> None:
    sim = Sim.start(fan({"mode": "n", "n": 5}, on_failure="drop"))
    sim.reply(sim.pending.popleft(), planner_of(20)(_plan_dispatch()))
    sim.run(lambda d: BOOM if d.input["i"] > 2 else planner_of(20)(d))
    assert sim.state.status is RunStatus.FAILED
    assert sim.state.error is not None and "needed 5" in sim.state.error.message


def test_cancel_cancels_live_tokens() -> None:
    sim = Sim.start(fan({"mode": "all"}))
    sim.reply(sim.pending.popleft(), planner_of(3)(_plan_dispatch()))
    decisions = sim.feed(RunCancelled("user asked", sim.now()))
    assert len(of(CancelToken, decisions)) == 3
    assert sim.state.status is RunStatus.CANCELLED


# --------------------------------------------------------------------------- waiting on others


def test_subworkflow_node_waits_then_continues() -> None:
    definition = workflow(
        [
            {
                "id": "sub",
                "kind": "subworkflow",
                "target_id": "child",
                "target_version": 2,
                "input_mapping": {"x": "input.x"},
            },
            task("after"),
        ],
        [{"from": "sub", "to": "after"}],
    )
    sim = Sim.start(definition, {"x": 7})
    start = sim.pending.popleft()
    assert isinstance(start, StartSubworkflow)
    assert (start.workflow_id, start.workflow_version, start.input) == ("child", 2, {"x": 7})
    assert sim.state.tokens[start.token_id].state is TokenState.WAITING_FOR_SUBWORKFLOW
    decisions = sim.reply(start, {"y": 8})
    assert [d.input for d in of(DispatchTask, decisions)] == [{"y": 8}]


def test_failed_subworkflow_fails_the_parent() -> None:
    definition = workflow([{"id": "sub", "kind": "subworkflow", "target_id": "child"}])
    sim = Sim.start(definition).run(lambda _d: BOOM)
    assert sim.state.status is RunStatus.FAILED
    assert of(FailRun, sim.decisions)[0].node_id == "sub"


AGENT_CASES: list[tuple[str, dict[str, Any], tuple[str | None, str | None] | None]] = [
    # (case, target fields, expected (agent_id, conversation_id) of the call; None: run fails)
    ("delegate to an agent", {"target_id": "agent1"}, ("agent1", None)),
    ("conversation from input", {"target_ref": "input.conversation"}, (None, "conv9")),
    ("missing conversation", {"target_ref": "input.nope"}, None),
]


@pytest.mark.parametrize(
    ("case", "target", "expected"), AGENT_CASES, ids=[c[0] for c in AGENT_CASES]
)
def test_agent_node(
    case: str, target: dict[str, Any], expected: tuple[str | None, str | None] | None
) -> None:
    definition = workflow(
        [
            {
                "id": "ask",
                "kind": "agent",
                "mode": "delegate",
                "input_mapping": {"message": "input.q"},
                **target,
            }
        ]
    )
    sim = Sim.start(definition, {"q": "why?", "conversation": "conv9"})
    calls = of(CallAgent, sim.decisions)
    if expected is None:
        assert not calls and sim.state.status is RunStatus.FAILED
        return
    assert [(c.agent_id, c.conversation_id, c.input, c.mode) for c in calls] == [
        (*expected, {"message": "why?"}, "delegate")
    ]
    assert sim.state.tokens["t1"].state is TokenState.WAITING_FOR_AGENT
    sim.run(lambda _d: {"reply": "because"})
    assert of(CompleteRun, sim.decisions)[0].output == {"reply": "because"}


def test_events_for_unknown_or_finished_tokens_change_nothing() -> None:
    sim = Sim.start(workflow([task("a")])).run(lambda _d: {})
    assert sim.feed(NodeSucceeded("t1", {}, sim.now())) == []
    assert sim.feed(NodeFailed("t99", BOOM, sim.now())) == []
    assert sim.feed(RunStarted(sim.now())) == []
