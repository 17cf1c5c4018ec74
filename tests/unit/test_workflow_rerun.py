"""Re-running a finished run from one of its nodes, the pure part: which recorded visits a re-run
reuses (``rerun_plan``) and what the planner decides with them (tables). The run on real Ray is
tests/integration/test_workflow_reruns.py."""

from __future__ import annotations

from typing import Any

import pytest

from actors.workflow_coordinator.domain import (
    CompleteToken,
    DispatchTask,
    NodeError,
    RunResumed,
    RunStarted,
    RunState,
    TokenState,
)
from actors.workflow_coordinator.rerun import (
    RerunPlan,
    reachable,
    rerun_plan,
    upstream,
    visit_keys,
)
from core.errors import Conflict, NotFound
from core.workflows import RunStatus, WorkflowDef
from tests.unit.test_workflow_planning import (
    Dispatch,
    Outcome,
    Sim,
    add_one,
    fan,
    of,
    planner_of,
    task,
    workflow,
)
from tests.unit.test_workflow_resumption import restore, stored

CHAIN = workflow(
    [task("a"), task("b"), task("c")], [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]
)


def original(definition: WorkflowDef, worker: Any, run_input: dict[str, Any]) -> Sim:
    sim = Sim.start(definition, run_input).run(worker)
    assert sim.state.status.terminal
    return sim


def rerun(
    first: Sim, from_node: str, node_input: dict[str, Any] | None = None
) -> tuple[Sim, RerunPlan]:
    """A re-run of ``first``'s run from ``from_node``, started (nothing answered yet)."""
    _run, records = stored(first.state)
    rerun_of = rerun_plan(first.state.workflow, "run1", records, from_node, node_input)
    state = RunState.new("run2", first.state.workflow, first.state.input)
    state.rerun = rerun_of
    sim = Sim(state)
    sim.feed(RunStarted(sim.now()))
    return sim, rerun_of


def dispatched_nodes(sim: Sim) -> list[str]:
    return [sim.state.tokens[d.token_id].node_id for d in of(DispatchTask, sim.decisions)]


def reused(sim: Sim) -> dict[str, str]:
    """Node id → the original token whose output it took, for the re-run's reused tokens."""
    return {t.node_id: t.reused_from for t in sim.state.tokens.values() if t.reused_from}


# --------------------------------------------------------------------------- graph helpers


@pytest.mark.parametrize(
    ("edges", "node", "down", "up"),
    [
        ([("a", "b"), ("b", "c")], "b", {"b", "c"}, {"a"}),
        ([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], "b", {"b", "d"}, {"a"}),
        ([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], "d", {"d"}, {"a", "b", "c"}),
        ([("init", "inc"), ("inc", "inc")], "inc", {"inc"}, {"init"}),  # a loop
        ([("a", "b")], "a", {"a", "b"}, set()),
    ],
)
def test_reachable_and_upstream(
    edges: list[tuple[str, str]], node: str, down: set[str], up: set[str]
) -> None:
    assert reachable(edges, node) == down
    assert upstream(edges, node) == up


def test_visit_keys_count_earlier_visits_at_the_same_position() -> None:
    visits = [("a", ()), ("w", (0,)), ("w", (1,)), ("w", (0,)), ("j", ())]
    assert visit_keys(visits) == [
        ("a", (), 0),
        ("w", (0,), 0),
        ("w", (1,), 0),
        ("w", (0,), 1),
        ("j", (), 0),
    ]


# --------------------------------------------------------------------------- planning a re-run


def test_a_chain_rerun_reuses_upstream_and_runs_the_node_and_downstream() -> None:
    first = original(CHAIN, add_one, {"n": 0})
    sim, _plan = rerun(first, "b")
    # The start token completes at once with a's recorded output; b is dispatched with it.
    (completed,) = of(CompleteToken, sim.decisions)
    assert (completed.token_id, completed.output, completed.reused_from) == ("t1", {"n": 1}, "t1")
    assert dispatched_nodes(sim) == ["b"]
    assert of(DispatchTask, sim.decisions)[0].input == {"n": 1}
    sim.run(add_one)
    assert sim.state.status is RunStatus.COMPLETED and sim.state.output == {"n": 3}
    assert dispatched_nodes(sim) == ["b", "c"] and reused(sim) == {"a": "t1"}
    assert first.state.output == {"n": 3}  # the original is its own state, untouched


def test_a_rerun_with_a_new_input_for_its_node() -> None:
    first = original(CHAIN, add_one, {"n": 0})
    sim, _plan = rerun(first, "b", {"n": 10})
    assert of(DispatchTask, sim.decisions)[0].input == {"n": 10}
    assert sim.run(add_one).state.output == {"n": 12}


def test_a_rerun_from_the_first_node_reuses_nothing() -> None:
    first = original(CHAIN, add_one, {"n": 0})
    sim, plan_ = rerun(first, "a")
    assert plan_.reuse == {}
    assert sim.run(add_one).state.output == {"n": 3} and dispatched_nodes(sim) == ["a", "b", "c"]


def test_side_branches_the_node_does_not_feed_are_reused() -> None:
    split = workflow(
        [task("a"), task("b"), task("c")], [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}]
    )
    first = original(split, add_one, {"n": 0})
    sim, _plan = rerun(first, "b")
    sim.run(add_one)
    assert dispatched_nodes(sim) == ["b"]
    assert set(reused(sim)) == {"a", "c"}
    assert sim.state.output == first.state.output


def test_a_fan_out_rerun_from_the_branches_and_from_the_join() -> None:
    first = original(fan({"mode": "all"}), planner_of(3), {})
    from_work, _plan = rerun(first, "work")
    from_work.run(planner_of(3))
    assert dispatched_nodes(from_work) == ["work", "work", "work"]
    assert set(reused(from_work)) == {"plan"}
    assert from_work.state.output == first.state.output

    from_merge, _plan = rerun(first, "merge")  # a pass join: nothing is dispatched at all
    assert from_merge.state.status is RunStatus.COMPLETED
    assert dispatched_nodes(from_merge) == []
    assert [t.node_id for t in from_merge.state.tokens.values() if t.reused_from] == [
        "plan",
        "work",
        "work",
        "work",
    ]
    assert from_merge.state.output == first.state.output


def test_a_loop_rerun_runs_every_visit_of_its_node_again() -> None:
    loop = workflow(
        [task("inc", input_mapping={"n": "previous.n"}), task("init")],
        [{"from": "init", "to": "inc"}, {"from": "inc", "to": "inc", "when": "output.n < 3"}],
        start=["init"],
        output_mapping={"n": "nodes.inc.n"},
    )

    def worker(d: Dispatch) -> Outcome:
        return {"n": 0} if d.task_id == "init" else add_one(d)

    first = original(loop, worker, {})
    sim, _plan = rerun(first, "inc")
    sim.run(worker)
    assert dispatched_nodes(sim) == ["inc", "inc", "inc"] and set(reused(sim)) == {"init"}
    assert sim.state.output == first.state.output == {"n": 3}


def test_a_rerun_of_a_failed_run_from_its_failed_node() -> None:
    calls = {"b": 0}

    def flaky_b(d: Dispatch) -> Outcome:
        if d.task_id == "b":
            calls["b"] += 1
            if calls["b"] == 1:
                return NodeError("EXECUTION_FAILED", "b broke")
        return add_one(d)

    first = original(CHAIN, flaky_b, {"n": 0})
    assert first.state.status is RunStatus.FAILED
    sim, _plan = rerun(first, "b")
    assert sim.run(flaky_b).state.status is RunStatus.COMPLETED
    assert sim.state.output == {"n": 3} and dispatched_nodes(sim) == ["b", "c"]


def test_a_lost_rerun_resumes_with_its_reuse() -> None:
    first = original(CHAIN, add_one, {"n": 0})
    sim, plan_ = rerun(first, "b")  # b is out when the coordinator is lost
    state = restore(sim.state)
    assert state.tokens["t1"].reused_from == "t1"  # the mark survives the store
    state.rerun = plan_
    resumed = Sim(state)
    resumed.feed(RunResumed(1, frozenset({"b"}), resumed.now()))
    resumed.run(add_one)
    assert resumed.state.output == {"n": 3} and dispatched_nodes(resumed) == ["b", "c"]


# --------------------------------------------------------------------------- refusals


def test_refusals() -> None:
    first = original(CHAIN, add_one, {"n": 0})
    _run, records = stored(first.state)
    with pytest.raises(NotFound, match="node nope not found in workflow wf"):
        rerun_plan(CHAIN, "run1", records, "nope")
    # A node the run never reached: it failed before.
    failed = original(
        CHAIN, lambda d: NodeError("X", "no") if d.task_id == "b" else add_one(d), {"n": 0}
    )
    _run, failed_records = stored(failed.state)
    with pytest.raises(Conflict, match="never reached node c"):
        rerun_plan(CHAIN, "run1", failed_records, "c")
    assert rerun_plan(CHAIN, "run1", failed_records, "b").reuse  # the failed node itself: fine


def test_a_dropped_failure_refuses_only_the_nodes_it_feeds() -> None:
    # b's failure is dropped: the run goes on to d through c, but b recorded no output.
    definition = workflow(
        [task("a"), task("b", on_failure="drop"), task("c"), task("d")],
        [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "c", "to": "d"}],
    )
    first = original(
        definition, lambda d: NodeError("X", "no") if d.task_id == "b" else add_one(d), {"n": 0}
    )
    assert first.state.status is RunStatus.COMPLETED
    _run, records = stored(first.state)
    assert rerun_plan(definition, "run1", records, "d").reuse  # b does not feed d
    joined = workflow(
        [task("a"), task("b", on_failure="drop"), task("c"), task("d")],
        [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "d"}],
        start=["a", "c"],
    )
    first = original(
        joined, lambda d: NodeError("X", "no") if d.task_id == "b" else add_one(d), {"n": 0}
    )
    _run, records = stored(first.state)
    with pytest.raises(Conflict, match="never reached node d"):
        rerun_plan(joined, "run1", records, "d")


def test_an_upstream_failed_visit_names_the_node() -> None:
    definition = workflow(
        [task("a"), task("b", on_failure="drop"), task("c")],
        [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "c"}],
    )
    # c is reached from a while b fails (dropped): b is upstream of c with no output.
    first = original(
        definition, lambda d: NodeError("X", "no") if d.task_id == "b" else add_one(d), {"n": 0}
    )
    assert [t.state for t in first.state.tokens.values() if t.node_id == "b"] == [TokenState.FAILED]
    _run, records = stored(first.state)
    with pytest.raises(Conflict, match=r"recorded no output for b \(upstream of c"):
        rerun_plan(definition, "run1", records, "c")
