"""The WorkflowCoordinator on the session's real local Ray: fan-out/fan-in, subworkflows, failures,
cancellation, agent nodes. Each test uses its own workflow and task ids."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.naming import workflow_actor_name
from core.domain import TaskAction, TaskDef
from core.errors import InvalidInput, NotFound
from core.ids import new_id, utc_now
from core.store import Store
from core.workflows import RunStatus, WorkflowDef, WorkflowParent
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.access import (
    cancel_run,
    conversations,
    get_history,
    get_run,
    run_workflow_to_end,
    start_workflow_run,
    wait_for_run,
    workflows,
)

pytestmark = pytest.mark.timeout(180)

STEPS = "library.workflows.steps"


def put_task(store: Store, step: str) -> str:
    task = TaskDef(
        id=f"wf-{step}-{new_id().lower()}",
        actions=[TaskAction(kind="python", params={"callable": f"{STEPS}:{step}"})],
    )
    return store.tasks.put(task, utc_now()).id


def put_workflow(store: Store, body: dict[str, Any]) -> WorkflowDef:
    definition = WorkflowDef.model_validate({"id": f"wf-{new_id().lower()}", **body})
    return store.workflows.put(definition, utc_now())


def research_workflow(
    store: Store, join: dict[str, Any], answer_step: str = "echo", on_failure: str = "fail_run"
) -> WorkflowDef:
    return put_workflow(
        store,
        {
            "input_schema": {
                "type": "object",
                "required": ["topic"],
                "properties": {"topic": {"type": "string"}, "n": {"type": "integer"}},
            },
            "nodes": [
                {
                    "id": "plan",
                    "kind": "task",
                    "target_id": put_task(store, "plan_questions"),
                    "input_mapping": {"topic": "input.topic", "n": "input.n"},
                },
                {
                    "id": "answer",
                    "kind": "task",
                    "target_id": put_task(store, answer_step),
                    "on_failure": on_failure,
                    "input_mapping": {
                        "question": "item",
                        "answer": "A{{index}}",
                        "message": "no answer to {{item}}",
                    },
                },
                {
                    "id": "collect",
                    "kind": "task",
                    "target_id": put_task(store, "collect_findings"),
                    "join": join,
                    "input_mapping": {"topic": "nodes.plan.topic", "findings": "branches"},
                },
            ],
            "edges": [
                {"from": "plan", "to": "answer", "foreach": "output.questions"},
                {"from": "answer", "to": "collect"},
            ],
            "output_mapping": {"count": "nodes.collect.count", "digest": "nodes.collect.digest"},
        },
    )


def coordinator_gone(run_id: str) -> bool:
    import ray

    try:
        ray.get_actor(workflow_actor_name(run_id), namespace="wonder")
    except ValueError:
        return True
    return False


async def test_fan_out_20_then_fan_in_all(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    workflow = research_workflow(store, {"mode": "all"})
    run_id = await start_workflow_run(workflow.id, {"topic": "owls", "n": 20})

    run = await wait_for_run(run_id, 120)

    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output["count"] == 20
    lines = run.output["digest"].splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == [f"A{i}" for i in range(20)]
    history = get_history(run_id)
    assert [r.node_id for r in history] == ["plan"] + ["answer"] * 20 + ["collect"]
    assert {r.state for r in history} == {"done"}
    assert {r.parent_token_id for r in history if r.node_id == "answer"} == {"t1"}
    assert history[-1].parent_token_id == "t1"  # the join continues from the fan-out's origin
    assert [e.type for e in run.events] == ["workflow_started", "workflow_completed"]
    await async_wait_for(lambda: coordinator_gone(run_id), timeout=30)
    assert get_run(run_id).status is RunStatus.COMPLETED  # the store keeps the outcome


async def test_fan_in_any_cancels_the_slow_branches(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    pause = put_task(store, "pause")
    workflow = put_workflow(
        store,
        {
            "nodes": [
                {"id": "fan", "kind": "pass"},
                {
                    "id": "work",
                    "kind": "task",
                    "target_id": pause,
                    "input_mapping": {"seconds": "item"},
                },
                {
                    "id": "first",
                    "kind": "pass",
                    "join": {"mode": "any"},
                    "input_mapping": {"winner": "branches.0"},
                },
            ],
            "edges": [
                {"from": "fan", "to": "work", "foreach": "input.delays"},
                {"from": "work", "to": "first"},
            ],
        },
    )
    # The slow branches sleep as long as the step allows (30 s): the run ends with the fast one,
    # and their states below say they were cancelled, not waited for (no timing threshold).
    run_id = await start_workflow_run(workflow.id, {"delays": [30, 0.1, 30]})
    run = await wait_for_run(run_id, 120)
    assert run.status is RunStatus.COMPLETED
    assert run.output == {"winner": {"slept": 0.1}}
    states = sorted(r.state for r in get_history(run_id) if r.node_id == "work")
    assert states == ["cancelled", "cancelled", "done"]


async def test_subworkflow_runs_in_a_child_coordinator(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    echo = put_task(store, "echo")
    child = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "inner",
                    "kind": "task",
                    "target_id": echo,
                    "input_mapping": {"said": "Child heard {{input.text}}"},
                }
            ],
        },
    )
    parent = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "sub",
                    "kind": "subworkflow",
                    "target_id": child.id,
                    "input_mapping": {"text": "input.text"},
                },
                {
                    "id": "after",
                    "kind": "task",
                    "target_id": echo,
                    "input_mapping": {"child_said": "nodes.sub.said"},
                },
            ],
            "edges": [{"from": "sub", "to": "after"}],
        },
    )
    run_id = await start_workflow_run(parent.id, {"text": "hello"})
    run = await wait_for_run(run_id, 60)

    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == {"child_said": "Child heard hello"}
    sub = next(r for r in get_history(run_id) if r.node_id == "sub")
    assert sub.child_run_id is not None and sub.state == "done"
    child_run = get_run(sub.child_run_id)
    assert child_run.status is RunStatus.COMPLETED
    assert child_run.parent == WorkflowParent(run_id=run_id, token_id=sub.token_id)
    assert child_run.depth == 1


FAILURES: list[tuple[str, str]] = [
    # (case, where the failing step sits)
    ("a fan-out branch fails the run", "branch"),
    ("a failed subworkflow fails its parent", "subworkflow"),
]


@pytest.mark.parametrize(("case", "where"), FAILURES, ids=[c[0] for c in FAILURES])
async def test_failure_propagates(ray_cluster: Cluster, case: str, where: str) -> None:
    store = ray_cluster.store
    if where == "branch":
        workflow = research_workflow(store, {"mode": "all"}, answer_step="fail")
        run_input: dict[str, Any] = {"topic": "owls", "n": 5}
        failing_node = "answer"
    else:
        inner = research_workflow(store, {"mode": "all"}, answer_step="fail")
        workflow = put_workflow(
            store, {"nodes": [{"id": "sub", "kind": "subworkflow", "target_id": inner.id}]}
        )
        run_input = {"topic": "owls", "n": 3}
        failing_node = "sub"

    run = await wait_for_run(await start_workflow_run(workflow.id, run_input), 60)

    assert run.status is RunStatus.FAILED
    assert run.error is not None and run.error.node_id == failing_node
    assert "no answer to" in run.error.message
    assert [e.type for e in run.events] == ["workflow_started", "workflow_failed"]
    states = {r.state for r in get_history(run.id)}
    assert "failed" in states and "waiting_for_task" not in states


async def test_dropped_failures_and_tool_result_shape(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    workflow = research_workflow(store, {"mode": "all"}, answer_step="fail", on_failure="drop")
    result = await run_workflow_to_end(workflow.id, {"topic": "owls", "n": 4})
    assert result["success"] is True
    assert result["result"]["count"] == 0


async def test_start_errors(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    workflow = research_workflow(store, {"mode": "all"})
    with pytest.raises(NotFound):
        await start_workflow_run("no-such-workflow", {})
    with pytest.raises(InvalidInput, match="topic"):
        await start_workflow_run(workflow.id, {"n": 2})
    result = await run_workflow_to_end(workflow.id, {"topic": 3})
    assert result["success"] is False and result["error"]["code"] == "INVALID_INPUT"


async def test_cancel_run_cancels_its_work(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    workflow = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "slow",
                    "kind": "task",
                    "target_id": put_task(store, "pause"),
                    "input_mapping": {"seconds": {"const": 25}},
                }
            ]
        },
    )
    run_id = await start_workflow_run(workflow.id, {})
    run = await cancel_run(run_id, "changed my mind")
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None and run.error.message == "changed my mind"
    assert [r.state for r in get_history(run_id)] == ["cancelled"]


async def test_agent_node_runs_a_delegated_turn(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _key = make_client(store, "workflow-agent")
    profile = scripted_profile(store, [{"reply": "verified: {{last_user}}"}])
    agent = make_agent(store, client_id, profile)
    workflow = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "ask",
                    "kind": "agent",
                    "target_id": agent.id,
                    "mode": "delegate",
                    "input_mapping": {"message": "Is {{input.claim}} true?"},
                }
            ],
            "output_mapping": {"answer": "nodes.ask.answer"},
        },
    )
    run_id = await start_workflow_run(workflow.id, {"claim": "water is wet"}, client_id=client_id)
    run = await wait_for_run(run_id, 60)
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == {"answer": "verified: Is water is wet true?"}
    record = get_history(run_id)[0]
    assert record.output["conversation_id"] and record.output["turn_id"]
    child = store.conversations.get(record.output["conversation_id"])
    assert child.agent_id == agent.id and child.client_id == client_id


async def test_a_loop_in_agent_node_joins_the_referenced_conversation(
    ray_cluster: Cluster,
) -> None:
    """``mode: loop_in`` (seed 001): the node's agent joins the conversation ``target_ref`` names,
    answers there seeing its history, and stays, answering when addressed later."""
    from tests.factories import make_conversation

    store = ray_cluster.store
    client_id, _key = make_client(store, "workflow-loop-in")
    host = make_agent(store, client_id, scripted_profile(store, [{"reply": "host: ok"}]))
    expert = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "expert saw: {{history}}"}])
    )
    conversation = make_conversation(store, client_id, host)
    first = await conversations().post_message(conversation.id, "SHARED LINE", "u")
    await conversations().wait_for_turn(conversation.id, first.turn_id, 60)
    workflow = put_workflow(
        store,
        {
            "nodes": [
                {
                    "id": "invite",
                    "kind": "agent",
                    "target_id": expert.id,
                    "target_ref": "input.conversation_id",
                    "mode": "loop_in",
                    "input_mapping": {"message": "Review {{input.topic}}"},
                }
            ],
            "output_mapping": {"answer": "nodes.invite.answer"},
        },
    )
    run_id = await start_workflow_run(
        workflow.id, {"conversation_id": conversation.id, "topic": "the plan"}, client_id=client_id
    )
    run = await wait_for_run(run_id, 60)
    assert run.status is RunStatus.COMPLETED, run.error
    answer = run.output["answer"]
    assert answer.startswith("expert saw:") and "SHARED LINE" in answer
    assert "Review the plan" in answer
    record = get_history(run_id)[0]
    assert record.output["conversation_id"] == conversation.id  # answered there, no child
    assert store.turns.get(record.output["turn_id"]).agent_id == expert.id
    assert store.conversations.list(client_id, parent_id=conversation.id) == []
    joined = store.conversations.get(conversation.id).participants
    assert ("agent", expert.id) in [(p.type, p.id) for p in joined]

    # It stays: addressed later, it answers in the shared conversation.
    asked = await conversations().post_message(conversation.id, f"@{expert.id} and now?", "u")
    await conversations().wait_for_turn(conversation.id, asked.turn_id, 60)
    assert store.turns.get(asked.turn_id).agent_id == expert.id


async def test_a_conversation_tool_runs_a_workflow(ray_cluster: Cluster) -> None:
    from core.domain import Tool
    from tests.factories import make_conversation

    store = ray_cluster.store
    workflow = research_workflow(store, {"mode": "all"})
    tool = store.tools.put(
        Tool(
            id=f"tool-research-{new_id().lower()}",
            name="research",
            description="research a topic",
            target_type="workflow",
            target_id=workflow.id,
            input_schema={
                "type": "object",
                "properties": {"topic": {"type": "string"}, "n": {"type": "integer"}},
            },
        ),
        utc_now(),
    )
    client_id, _key = make_client(store, "workflow-tool")
    profile = scripted_profile(
        store,
        [
            {"tool_calls": [{"name": "research", "arguments": {"topic": "bees", "n": 3}}]},
            {"reply": "found: {{last_tool}}"},
        ],
    )
    conversation = make_conversation(
        store, client_id, make_agent(store, client_id, profile, tools=[tool])
    )

    posted = await conversations().post_message(conversation.id, "research bees", "user-1")
    turn = await conversations().wait_for_turn(conversation.id, posted.turn_id, 60)

    assert turn.status.value == "completed", turn
    answer = [m for m in store.messages.list(conversation.id) if m.role.value == "agent"][-1]
    assert '"count": 3' in answer.content and "What is bees?" in answer.content
    [run] = store.workflow_runs.list_runs(workflow_id=workflow.id)
    assert run.parent is not None and run.parent.type == "conversation"
    assert run.client_id == client_id and run.context.turn_id == posted.turn_id


async def test_runs_start_on_reserved_coordinators(ray_cluster: Cluster) -> None:
    import ray

    from cluster.naming import RESERVE_NAME

    store = ray_cluster.store
    workflow = put_workflow(store, {"nodes": [{"id": "only", "kind": "pass"}]})
    await wait_for_run(await start_workflow_run(workflow.id, {"x": 1}), 60)  # wakes the reserve
    reserve = ray.get_actor(RESERVE_NAME, namespace="wonder")
    coordinators = workflows().coordinators

    def stats() -> dict[str, int]:
        found: dict[str, int] = ray.get(reserve.stats.remote())
        return found

    await async_wait_for(
        lambda: "ready" in coordinators._reserve and stats()["ready"] >= 1,  # type: ignore[attr-defined]
        60,
    )
    taken = stats()["taken"]
    run = await wait_for_run(await start_workflow_run(workflow.id, {"x": 2}), 60)
    assert run.status is RunStatus.COMPLETED and run.output == {"x": 2}
    assert stats()["taken"] == taken + 1
