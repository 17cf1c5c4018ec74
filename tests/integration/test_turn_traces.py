"""One trace per turn across the cluster, on a real local Ray (docs/observability.md).

A turn calls a task tool (a Ray task in an executor worker) and delegates to another agent (its own
Conversation actor), or calls a workflow tool (a run on a workflow coordinator, whose node runs an
executor task): the spans each process recorded join the parent turn's trace, under the right
parents, and the delegated turn's model calls are recorded as that turn's. The records are written
by each process's background writer; the test reads the store they wrote.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.domain import Tool, TurnStatus
from core.ids import new_id, utc_now
from core.trace_records import SpanNode, span_tree
from core.tracing import turn_span_id, turn_trace_id
from core.workflows import WorkflowDef
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import post

pytestmark = pytest.mark.timeout(180)


def _walk(node: SpanNode) -> list[SpanNode]:
    return [node, *(n for child in node.children for n in _walk(child))]


async def test_a_turn_is_one_trace_across_actor_executor_and_delegate(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    expert = make_agent(store, client_id, scripted_profile(store, [{"reply": "expert says hi"}]))
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{expert.id.lower()}",
            name="ask_expert",
            description="ask the expert",
            input_schema={"type": "object", "properties": {"input": {"type": "string"}}},
            target_type="agent",
            target_id=expert.id,
            invocation_mode="delegate",
        ),
        utc_now(),
    )
    pid = task_tool(
        store, "pid", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    script = [
        {
            "tool_calls": [
                {"name": "pid", "arguments": {}},
                {"name": "ask_expert", "arguments": {"input": "hello expert"}},
            ]
        },
        {"reply": "done"},
    ]
    boss = make_agent(store, client_id, scripted_profile(store, script), [pid, ask])
    conv = make_conversation(store, client_id, boss)
    ack = await post(conv.id, "go", "u")
    await async_wait_for(
        lambda: store.turns.get(ack.turn_id).status is TurnStatus.COMPLETED, timeout=90
    )
    assert store.records.trace_of(ack.turn_id) is None  # a message's turn has its own trace

    def tree() -> SpanNode | None:
        spans = store.records.spans(turn_trace_id(ack.turn_id))
        root = span_tree(spans, turn_span_id(ack.turn_id))
        if root is None:
            return None
        names = [n.name for n in _walk(root)]
        done = names.count("chat script") >= 3 and any(n.startswith("run_task") for n in names)
        return root if done else None

    root = await async_wait_for(tree, timeout=60, interval=0.5)
    tools = {c.name: c for c in root.children if c.name.startswith("execute_tool")}
    assert set(tools) == {"execute_tool pid", "execute_tool ask_expert"}
    (task,) = tools["execute_tool pid"].children
    assert task.name == f"run_task {pid.target_id}" and task.process == "executor"
    assert root.parent_span_id is None and root.turn_id == ack.turn_id
    assert [c.name for c in root.children if c.name == "chat script"] == ["chat script"] * 2
    assert all(c.process == "conversation" for c in root.children)
    # The delegated turn runs in its own actor, under the tool call that delegated it.
    (child_turn,) = tools["execute_tool ask_expert"].children
    assert child_turn.name.startswith("invoke_agent")
    assert child_turn.parent_span_id == tools["execute_tool ask_expert"].span_id
    assert child_turn.process == "conversation" and child_turn.turn_id != ack.turn_id
    assert child_turn.trace_id == root.trace_id
    assert [c.name for c in child_turn.children] == ["chat script"]
    assert child_turn.attributes["gen_ai.agent.id"] == expert.id
    joined = store.records.trace_of(str(child_turn.turn_id))
    assert joined is not None and joined.trace_id == root.trace_id

    # The delegated turn's call is recorded as that turn's, with what its model was sent.
    calls = await async_wait_for(
        lambda: store.records.calls(turn_ids=[str(child_turn.turn_id)]) or None, timeout=30
    )
    request: Any = calls[0].request
    assert request["messages"][-1] == {"role": "user", "content": "hello expert"}
    links = {(link.kind, link.target_id) for link in store.records.links(ack.turn_id)}
    assert ("child_turn", child_turn.turn_id) in links


async def test_a_workflow_tools_run_joins_the_turns_trace(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    pid = task_tool(
        store, "pid", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    workflow = store.workflows.put(
        WorkflowDef.model_validate(
            {
                "id": f"wf-{new_id().lower()}",
                "nodes": [{"id": "probe", "kind": "task", "target_id": pid.target_id}],
            }
        ),
        utc_now(),
    )
    tool = store.tools.put(
        Tool(
            id=f"tool-probe-{new_id().lower()}",
            name="probe",
            description="run the probe workflow",
            input_schema={"type": "object"},
            target_type="workflow",
            target_id=workflow.id,
        ),
        utc_now(),
    )
    script = [{"tool_calls": [{"name": "probe", "arguments": {}}]}, {"reply": "done"}]
    agent = make_agent(store, client_id, scripted_profile(store, script), [tool])
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "go", "u")
    await async_wait_for(
        lambda: store.turns.get(ack.turn_id).status is TurnStatus.COMPLETED, timeout=90
    )

    def tree() -> SpanNode | None:
        spans = store.records.spans(turn_trace_id(ack.turn_id))
        root = span_tree(spans, turn_span_id(ack.turn_id))
        names = [n.name for n in _walk(root)] if root is not None else []
        done = any(n.startswith("run_task") for n in names) and names.count("chat script") == 2
        return root if done and any(n.startswith("invoke_workflow") for n in names) else None

    root = await async_wait_for(tree, timeout=60, interval=0.5)
    (call,) = [c for c in root.children if c.name == "execute_tool probe"]
    (run,) = call.children
    assert run.name == f"invoke_workflow {workflow.id}" and run.process == "workflow"
    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run.attributes["gen_ai.conversation.id"] == conv.id
    (node,) = run.children
    assert node.name == "workflow_node probe" and node.process == "workflow"
    (task,) = node.children
    assert task.name == f"run_task {pid.target_id}" and task.process == "executor"
    assert task.trace_id == root.trace_id
