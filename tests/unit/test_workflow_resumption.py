"""Workflow runs that survive their coordinator (issue 12, item 2), the pure part: the state a
re-created coordinator rebuilds from the stored records is the state that was lost, and what it
decides on ``RunResumed`` (tables). The kill -9 on real Ray is
tests/integration/test_durable_workflows.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.workflow_coordinator.domain import (
    CallAgent,
    CancelToken,
    CompleteRun,
    DispatchTask,
    FailRun,
    FailToken,
    NodeError,
    ResumeRun,
    RunResumed,
    RunState,
    StartSubworkflow,
)
from actors.workflow_coordinator.planning import plan
from actors.workflow_coordinator.records import fanout_of, node_record, restored_state, run_error
from actors.workflow_coordinator.resumption import MAX_RESUMPTIONS, agent_call_ids
from core.domain import TaskAction, TaskDef
from core.errors import Conflict
from core.ids import utc_now
from core.workflows import NodeRecord, RunStatus, WorkflowDef, WorkflowParent, WorkflowRun
from tests.conftest import async_wait_for
from tests.inprocess import InProcessCluster
from tests.unit.test_workflow_planning import (
    BOOM,
    FLAKY,
    T0,
    Dispatch,
    Outcome,
    Sim,
    fan,
    of,
    planner_of,
    task,
    workflow,
)

# --------------------------------------------------------------------------- the store's view


def stored(state: RunState) -> tuple[WorkflowRun, list[NodeRecord]]:
    """What the store holds of ``state`` (through JSON, as the database keeps it)."""
    error = state.error
    if error is not None:
        node_id, token_id = state.failed_node or (None, None)
        run_err = run_error(error, node_id, token_id)
    run = WorkflowRun(
        id=state.run_id,
        workflow_id=state.workflow.id,
        workflow_version=state.workflow.version,
        status=state.status,
        input=state.input,
        output=state.output,
        error=run_err if error is not None else None,
        created_at=T0,
    )
    records = [
        node_record(
            state.run_id,
            token,
            state.graph.node(token.node_id).kind,
            None,
            fanout_of(state, token),
        )
        for token in sorted(state.tokens.values(), key=lambda t: t.seq)
    ]
    return (
        WorkflowRun.model_validate_json(run.model_dump_json()),
        [NodeRecord.model_validate_json(r.model_dump_json()) for r in records],
    )


def restore(state: RunState) -> RunState:
    run, records = stored(state)
    return restored_state(run, state.workflow, records)


def assert_same(restored: RunState, state: RunState) -> None:
    assert restored.tokens == state.tokens
    assert restored.live == state.live
    assert restored.groups == state.groups
    joins = {k: (j.arrivals, j.fired) for k, j in state.joins.items()}
    assert {k: (j.arrivals, j.fired) for k, j in restored.joins.items()} == joins
    assert (restored.next_seq, restored.status, restored.output) == (
        state.next_seq,
        state.status,
        state.output,
    )
    assert (restored.error, restored.failed_node) == (state.error, state.failed_node)


# --------------------------------------------------------------------------- round trips


def direct_join() -> WorkflowDef:
    """A foreach edge straight into a join: branches arrive with their items, no token each."""
    return workflow(
        [task("plan"), {"id": "merge", "kind": "pass", "join": {"mode": "all"}}],
        [{"from": "plan", "to": "merge", "foreach": "output.items"}],
    )


def nested() -> WorkflowDef:
    return workflow(
        [
            task("outer"),
            task("inner"),
            task("leaf", input_mapping={"x": "item", "parent": "nodes.inner.name"}),
            {"id": "join_inner", "kind": "pass", "join": {"mode": "all"}},
            {"id": "join_outer", "kind": "pass", "join": {"mode": "n", "n": 2}},
        ],
        [
            {"from": "outer", "to": "inner", "foreach": "output.names"},
            {"from": "inner", "to": "leaf", "foreach": "output.values"},
            {"from": "leaf", "to": "join_inner"},
            {"from": "join_inner", "to": "join_outer"},
        ],
    )


def nested_worker(d: Dispatch) -> Outcome:
    if d.task_id == "outer":
        return {"names": ["a", "b", "c"]}
    if d.task_id == "inner":
        return {"name": d.input["item"], "values": [1, 2]}
    return {"v": f"{d.input['parent']}{d.input['x']}"}


def dropping(d: Dispatch) -> Outcome:
    if d.task_id == "work" and d.input["i"] % 2:
        return BOOM
    return planner_of(6)(d)


ROUND_TRIPS: list[tuple[str, WorkflowDef, Callable[[Dispatch], Outcome], bool]] = [
    # (case, workflow, worker, newest dispatch first)
    ("chain", workflow([task("a"), task("b")], [{"from": "a", "to": "b"}]), lambda _d: {}, False),
    ("fan-out, join all", fan({"mode": "all"}), planner_of(6), True),
    ("fan-out, join any", fan({"mode": "any"}), planner_of(6), False),
    ("fan-out, dropped failures", fan({"mode": "all"}, on_failure="drop"), dropping, True),
    ("foreach straight into a join", direct_join(), planner_of(4), False),
    ("nested fan-outs, inner all, outer n", nested(), nested_worker, True),
    ("retries", workflow([task("a", retry={"max_attempts": 3})]), lambda _d: FLAKY, False),
]


@pytest.mark.parametrize(
    ("case", "definition", "worker", "lifo"), ROUND_TRIPS, ids=[c[0] for c in ROUND_TRIPS]
)
def test_the_records_rebuild_the_state_after_every_step(
    case: str, definition: WorkflowDef, worker: Callable[[Dispatch], Outcome], lifo: bool
) -> None:
    sim = Sim.start(definition, {"n": 1})
    assert_same(restore(sim.state), sim.state)
    steps = 0
    while sim.pending and not sim.state.status.terminal:
        dispatch = sim.pending.pop() if lifo else sim.pending.popleft()
        if sim.state.tokens[dispatch.token_id].state.live:
            sim.reply(dispatch, worker(dispatch))
            assert_same(restore(sim.state), sim.state)
            steps += 1
    assert steps >= 1 and sim.state.status.terminal


@pytest.mark.parametrize("lost_after", [1, 3, 5, 8])
def test_a_resumed_run_ends_as_an_uninterrupted_one_and_reruns_nothing_done(
    lost_after: int,
) -> None:
    whole = Sim.start(fan({"mode": "all"})).run(planner_of(8), lifo=True)

    sim = Sim.start(fan({"mode": "all"}))
    for _ in range(lost_after):  # answer some, then the coordinator is lost
        dispatch = sim.pending.pop()
        sim.reply(dispatch, planner_of(8)(dispatch))
    done_before = {t.id for t in sim.state.tokens.values() if not t.state.live}
    resumed = Sim(restore(sim.state), clock=sim.clock)
    decisions = resumed.feed(RunResumed(1, frozenset({"work", "plan"}), resumed.now()))
    assert isinstance(decisions[0], ResumeRun)
    assert not {d.token_id for d in of(DispatchTask, decisions)} & done_before
    resumed.run(planner_of(8), lifo=True)

    assert resumed.state.status is RunStatus.COMPLETED
    assert resumed.state.output == whole.state.output


# --------------------------------------------------------------------------- what a resume decides


def split(once_on_failure: str = "fail_run") -> WorkflowDef:
    """A fan-out of three tasks: ``done`` (finishes before the loss), ``idem`` and ``once``."""
    return workflow(
        [
            {"id": "split", "kind": "pass"},
            task("done"),
            task("idem"),
            task("once", on_failure=once_on_failure),
            {"id": "j", "kind": "pass", "join": {"mode": "all"}},
        ],
        [
            {"from": "split", "to": "done"},
            {"from": "split", "to": "idem"},
            {"from": "split", "to": "once"},
            {"from": "done", "to": "j"},
            {"from": "idem", "to": "j"},
            {"from": "once", "to": "j"},
        ],
    )


def lost_mid_split(once_on_failure: str) -> RunState:
    """``split`` with ``done`` answered, ``idem`` and ``once`` out: what a new coordinator finds."""
    sim = Sim.start(split(once_on_failure))
    done = next(d for d in sim.pending if d.task_id == "done")
    sim.reply(done, {"from": "done"})
    return restore(sim.state)


Shape = list[tuple[type, str | None]]  # (decision type, token id)


def shape(decisions: list[Any]) -> Shape:
    return [(type(d), getattr(d, "token_id", None)) for d in decisions]


RESUMES: list[tuple[str, str, frozenset[str], int, Shape, RunStatus]] = [
    # (case, on_failure of `once`, idempotent nodes, resumption, decisions, status after)
    (
        "idempotent task re-run, the other one fails the run",
        "fail_run",
        frozenset({"idem"}),
        1,
        [
            (ResumeRun, None),
            (DispatchTask, "t3"),
            (FailToken, "t4"),
            (CancelToken, "t3"),
            (FailRun, "t4"),
        ],
        RunStatus.FAILED,
    ),
    (
        "idempotent task re-run, the other one's branch dropped",
        "drop",
        frozenset({"idem"}),
        1,
        [(ResumeRun, None), (DispatchTask, "t3"), (FailToken, "t4")],
        RunStatus.RUNNING,
    ),
    (
        "nothing idempotent: the first interrupted task fails the run",
        "drop",
        frozenset(),
        2,
        [(ResumeRun, None), (FailToken, "t3"), (CancelToken, "t4"), (FailRun, "t3")],
        RunStatus.FAILED,
    ),
    (
        f"lost a {MAX_RESUMPTIONS + 1}th time: the run fails",
        "drop",
        frozenset({"idem", "once"}),
        MAX_RESUMPTIONS + 1,
        [(CancelToken, "t3"), (CancelToken, "t4"), (FailRun, None)],
        RunStatus.FAILED,
    ),
]


@pytest.mark.parametrize(
    ("case", "on_failure", "idempotent", "resumption", "expected", "status"),
    RESUMES,
    ids=[c[0] for c in RESUMES],
)
def test_resume_decisions(
    case: str,
    on_failure: str,
    idempotent: frozenset[str],
    resumption: int,
    expected: Shape,
    status: RunStatus,
) -> None:
    sim = Sim(lost_mid_split(on_failure), clock=100)
    decisions = sim.feed(RunResumed(resumption, idempotent, sim.now()))
    assert shape(decisions) == expected
    assert sim.state.status is status
    assert sim.state.tokens["t2"].output == {"from": "done"}  # done before: never dispatched again
    failed = [d for d in decisions if isinstance(d, FailToken | FailRun)]
    for failure in failed:
        assert failure.error.message.startswith("interrupted: ")
        assert not isinstance(failure, FailToken) or not failure.error.retriable  # never retried
    if resumption > MAX_RESUMPTIONS:
        assert f"lost {resumption} times" in failed[0].error.message


def test_a_dropped_interruption_lets_the_join_fire_with_the_rest() -> None:
    sim = Sim(lost_mid_split("drop"), clock=100)
    sim.feed(RunResumed(1, frozenset({"idem"}), sim.now()))
    sim.run(lambda d: {"from": d.task_id})
    assert sim.state.status is RunStatus.COMPLETED
    assert sim.state.output == {"branches": [{"from": "done"}, {"from": "idem"}]}


def test_a_retried_task_resumes_at_its_attempt() -> None:
    sim = Sim.start(workflow([task("a", retry={"max_attempts": 3, "backoff_ms": 10})]))
    sim.reply(sim.pending.popleft(), FLAKY)  # attempt 2 is out when the coordinator is lost
    resumed = Sim(restore(sim.state), clock=sim.clock)
    [_resume, dispatch] = resumed.feed(RunResumed(1, frozenset({"a"}), resumed.now()))
    assert isinstance(dispatch, DispatchTask) and (dispatch.attempt, dispatch.delay_ms) == (2, 0)


def test_subworkflow_and_agent_nodes_reattach() -> None:
    definition = workflow(
        [
            {"id": "split", "kind": "pass"},
            {"id": "sub", "kind": "subworkflow", "target_id": "child"},
            {
                "id": "ask",
                "kind": "agent",
                "target_id": "agent1",
                "input_mapping": {"m": "input.m"},
            },
        ],
        [{"from": "split", "to": "sub"}, {"from": "split", "to": "ask"}],
    )
    sim = Sim.start(definition, {"m": "hi"})
    first = {type(d): d for d in sim.pending}
    resumed = Sim(restore(sim.state), clock=sim.clock)
    decisions = resumed.feed(RunResumed(1, frozenset(), resumed.now()))
    [sub] = of(StartSubworkflow, decisions)
    [ask] = of(CallAgent, decisions)
    assert sub.reattach and not first[StartSubworkflow].reattach
    assert (sub.token_id, sub.attempt, sub.input) == ("t2", 1, first[StartSubworkflow].input)
    assert ask == first[CallAgent]  # same token, attempt, input: the same message id


def test_agent_call_ids_are_derived_per_attempt() -> None:
    assert agent_call_ids("run_1", "t2", 1) == agent_call_ids("run_1", "t2", 1)
    assert agent_call_ids("run_1", "t2", 1) != agent_call_ids("run_1", "t2", 2)
    message_id, conversation_id = agent_call_ids("run_1", "t2", 1)
    assert message_id.startswith("msg_") and conversation_id.startswith("conv_")
    assert len(conversation_id) <= 64  # fits the store's id columns with a real run id
    assert len(agent_call_ids("run_" + "0" * 26, "t100000", 10)[1]) <= 64


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.PENDING])
def test_only_a_running_run_is_resumed(status: RunStatus) -> None:
    sim = Sim.start(workflow([task("a")])).run(lambda _d: {"ok": True})
    state = restore(sim.state)
    state.status = status
    assert plan(state, RunResumed(1, frozenset(), T0)) == []


def test_a_running_run_with_nothing_out_completes() -> None:
    sim = Sim.start(workflow([task("a")]))
    sim.reply(sim.pending.popleft(), {"ok": True})
    state = restore(sim.state)
    state.status = RunStatus.RUNNING  # lost after the token's record, before the run's (never
    state.output = None  # written apart, but the rule holds)
    decisions = plan(state, RunResumed(1, frozenset(), T0))
    assert [type(d) for d in decisions] == [ResumeRun, CompleteRun]


def test_interrupted_error_names_the_task() -> None:
    sim = Sim(lost_mid_split("fail_run"), clock=100)
    decisions = sim.feed(RunResumed(1, frozenset(), sim.now()))
    [failure] = of(FailToken, decisions)
    assert failure.error == NodeError(
        "EXECUTION_FAILED",
        "interrupted: the coordinator was lost while task idem ran, so the task may or may not "
        "have taken effect; it is not run again because it is not declared idempotent",
    )


# --------------------------------------------------------------------------- the shell, in-process


async def test_a_coordinator_gone_for_good_is_recreated_by_the_next_read_and_resumes(
    tmp_path: Path,
) -> None:
    """The production coordinator and run service in this process (no Ray): the coordinator is
    lost mid-task; reading the run makes a new one, which re-runs the idempotent task."""
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})
    try:
        store, effects = cluster.store, tmp_path / "effects"
        count = "tests.callables:count_then_wait"  # a line per run; waits the first time only
        task = TaskDef(
            id="count",
            actions=[TaskAction(kind="python", params={"callable": count})],
            idempotent=True,
        )
        store.tasks.put(task, utc_now())
        mapping = {"path": {"const": str(effects)}, "seconds": {"const": 60}}
        node = {"id": "a", "kind": "task", "target_id": "count", "input_mapping": mapping}
        store.workflows.put(WorkflowDef.model_validate({"id": "wf", "nodes": [node]}), utc_now())
        runs = cluster.workflows
        run_id = await runs.start("wf", {})
        await async_wait_for(effects.exists, timeout=30)

        cluster.coordinators.lose(run_id)
        assert runs.get(run_id).status is RunStatus.RUNNING  # and a new coordinator is made
        run = await runs.wait(run_id, 30)

        assert run.status is RunStatus.COMPLETED and run.output == {"runs": 2}
        events = [e.type for e in run.events]
        assert events == ["workflow_started", "workflow_resumed", "workflow_completed"]
    finally:
        cluster.close()


async def test_a_run_stored_but_never_launched_is_started_by_its_id(tmp_path: Path) -> None:
    """A subworkflow node's child run is stored, then its coordinator launched; a parent lost in
    between leaves it pending. Starting it again by its id (the node re-attaching) launches it;
    the id of another parent's run is refused."""
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})
    try:
        store = cluster.store
        store.workflows.put(
            WorkflowDef.model_validate({"id": "wf", "nodes": [{"id": "p", "kind": "pass"}]}),
            utc_now(),
        )
        parent = WorkflowParent(run_id="run_parent", token_id="t1")
        stored = WorkflowRun(
            id="run_child",
            workflow_id="wf",
            workflow_version=1,
            parent=parent,
            created_at=utc_now(),
        )
        store.workflow_runs.insert(stored)
        runs = cluster.workflows

        assert await runs.start("wf", {}, parent=parent, run_id="run_child") == "run_child"
        run = await runs.wait("run_child", 30)
        assert run.status is RunStatus.COMPLETED
        assert await runs.start("wf", {}, parent=parent, run_id="run_child") == "run_child"
        assert [e.type for e in runs.get("run_child").events].count("workflow_started") == 1
        other = WorkflowParent(run_id="run_parent", token_id="t2")
        with pytest.raises(Conflict):
            await runs.start("wf", {}, parent=other, run_id="run_child")
    finally:
        cluster.close()
