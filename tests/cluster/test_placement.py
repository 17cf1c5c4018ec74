"""Placement on several Ray nodes: where conversations, tasks, singletons and models land."""

from __future__ import annotations

from ray.util.state import list_tasks

from cluster.naming import DIRECTORY_NAME, RUNNER_NAME, conversation_actor_name
from tests.cluster.conftest import MultiNode, actor_nodes
from tests.conftest import wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool

CONVERSATIONS = 6


def held_on(multinode: MultiNode, nodes: set[str]) -> dict[str, int]:
    """How many of the directory's actors it placed on each of ``nodes``."""
    placed: dict[str, int] = multinode.drive("directory")["nodes"]
    return {node: placed.get(node, 0) for node in nodes}


def gap(held: dict[str, int]) -> int:
    return max(held.values()) - min(held.values())


def test_conversations_even_out_over_workers_tasks_avoid_accelerators(multinode: MultiNode) -> None:
    store = multinode.store
    client_id, _ = make_client(store)
    note = task_tool(store, "note", [{"kind": "context.set", "params": {"key": "k", "value": 1}}])
    profile = scripted_profile(
        store,
        [{"tool_calls": [{"name": "note", "arguments": {}}]}, {"reply": "done"}],
    )
    agent = make_agent(store, client_id, profile, [note])
    convs = [make_conversation(store, client_id, agent).id for _ in range(CONVERSATIONS)]
    cpu_ids = {n.node_id for n in multinode.cpu}
    before = held_on(multinode, cpu_ids)

    result = multinode.drive("converse", conversations=convs, text="go")
    assert result["statuses"] == ["completed"] * CONVERSATIONS

    names = [conversation_actor_name(c) for c in convs]
    where = wait_for(
        lambda: (found := actor_nodes(multinode, names)) and len(found) == len(names) and found
    )
    # The directory places them, on the CPU workers only (not the head while workers live, never
    # the accelerator node), each on the worker holding the fewest of its actors: the gap
    # between the workers closes by one per new actor, down to one.
    assert set(where.values()) <= cpu_ids, where
    after = held_on(multinode, cpu_ids)
    assert sum(after.values()) - sum(before.values()) >= CONVERSATIONS, (before, after)
    assert gap(after) <= max(1, gap(before) - CONVERSATIONS), (before, after)

    singletons = actor_nodes(multinode, [DIRECTORY_NAME, RUNNER_NAME])
    assert singletons.get(DIRECTORY_NAME) == multinode.head.node_id

    def executor_nodes() -> set[str] | None:
        tasks = list_tasks(
            address=multinode.nodes.dashboard_url,
            filters=[("state", "=", "FINISHED")],
            limit=10_000,
            raise_on_missing_output=False,
        )
        # Ray tasks (``execute_task``) and calls to the executor pool's members alike.
        ran = [
            t
            for t in tasks
            if "execute" in (name := t.func_or_class_name or "")
            or name.startswith("ExecutorProcess.run")
        ]
        return {t.node_id for t in ran} if len(ran) >= CONVERSATIONS else None

    task_nodes = wait_for(executor_nodes, timeout=60, interval=1.0)
    assert multinode.accelerator.node_id not in task_nodes
    assert task_nodes & cpu_ids


def test_model_deployments_and_singletons_go_where_the_rules_say(multinode: MultiNode) -> None:
    """The actor options the vLLM and embedder deployments and the singletons get, applied to a
    probe actor on the live cluster; and ``wonder up``'s check of what the nodes can place."""
    found = multinode.drive("placements", rounds=2)
    accelerator, head = multinode.accelerator.node_id, multinode.head.node_id
    assert set(found["llm"]) == {accelerator}
    assert accelerator not in set(found["embedder"])
    assert set(found["embedder_on_gpu"]) == {accelerator}
    assert set(found["singleton"]) == {head}
    assert len(found["refusals"]) == 1
    assert "WONDER_LLM_NUM_REPLICAS=2" in found["refusals"][0]
