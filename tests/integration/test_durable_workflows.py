"""Workflow runs that survive their coordinator (issue 12, item 2): kill -9 of a coordinator's
process mid-run on the session's real local Ray. Ray restarts it; the new incarnation rebuilds the
run from the store and resumes it by the rules of ``actors.workflow_coordinator.resumption``.

The pure rules are tested as tables in tests/unit/test_workflow_resumption.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.workflow_coordinator.resumption import RESUMED_EVENT
from cluster.naming import NAMESPACE, workflow_actor_name
from core.domain import MessageRole, TaskAction, TaskDef
from core.ids import new_id, utc_now
from core.store import Store
from core.workflows import RunStatus, WorkflowDef
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.access import get_history, start_workflow_run, wait_for_run

pytestmark = pytest.mark.timeout(240)

COUNT = "tests.callables:count_then_wait"  # appends a line per run; waits the first time only


def _task(store: Store, callable_ref: str, idempotent: bool = False) -> str:
    task = TaskDef(
        id=f"durable-{new_id().lower()}",
        actions=[TaskAction(kind="python", params={"callable": callable_ref})],
        idempotent=idempotent,
    )
    return store.tasks.put(task, utc_now()).id


def _counting(node_id: str, task_id: str, effects: Path, seconds: float, **extra: Any) -> Any:
    return {
        "id": node_id,
        "kind": "task",
        "target_id": task_id,
        "input_mapping": {
            "path": {"const": str(effects / node_id)},
            "seconds": {"const": seconds},
        },
        **extra,
    }


def _fan_out(store: Store, effects: Path, agent_id: str) -> WorkflowDef:
    """One split into five branches: ``done`` finishes at once; ``idem`` (idempotent) and
    ``once`` (not) work for a minute the first time they run; ``ask`` is an agent turn and
    ``sub`` a child run, both a few seconds long. ``once`` drops its branch on failure."""
    child = WorkflowDef(
        id=f"durable-child-{new_id().lower()}",
        nodes=[
            {
                "id": "slow",
                "kind": "task",
                "target_id": _task(store, "library.workflows.steps:pause"),
                "input_mapping": {"seconds": {"const": 4}},
            }
        ],
    )
    store.workflows.put(child, utc_now())
    definition = WorkflowDef.model_validate(
        {
            "id": f"durable-{new_id().lower()}",
            "nodes": [
                {"id": "split", "kind": "pass"},
                _counting("done", _task(store, COUNT), effects, 0.01),
                _counting("idem", _task(store, COUNT, idempotent=True), effects, 60),
                _counting("once", _task(store, COUNT), effects, 60, on_failure="drop"),
                {
                    "id": "ask",
                    "kind": "agent",
                    "target_id": agent_id,
                    "input_mapping": {"message": {"const": "are you there?"}},
                },
                {"id": "sub", "kind": "subworkflow", "target_id": child.id},
                {"id": "j", "kind": "pass", "join": {"mode": "all"}},
            ],
            "edges": [
                *({"from": "split", "to": n} for n in ("done", "idem", "once", "ask", "sub")),
                *({"from": n, "to": "j"} for n in ("done", "idem", "once", "ask", "sub")),
            ],
        }
    )
    return store.workflows.put(definition, utc_now())


async def _coordinator_pid(run_id: str) -> int:
    handle = ray.get_actor(workflow_actor_name(run_id), namespace=NAMESPACE)
    status: dict[str, Any] = await handle.status.remote()
    return int(status["pid"])


async def test_kill_9_mid_fan_out_resumes_the_run_by_the_rules(
    ray_cluster: Cluster, tmp_path: Path
) -> None:
    store = ray_cluster.store
    client_id, _key = make_client(store, "durable-workflows")
    agent = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "here: {{last_user}}", "delay_s": 3}])
    )
    workflow = _fan_out(store, tmp_path, agent.id)
    run_id = await start_workflow_run(workflow.id, {}, client_id=client_id)

    def out(node_id: str) -> bool:
        record = next((r for r in get_history(run_id) if r.node_id == node_id), None)
        return record is not None and (record.child_run_id is not None or record.state == "done")

    def every_branch_at_work() -> bool:
        return (
            all((tmp_path / n).exists() for n in ("done", "idem", "once"))
            and out("done")
            and out("sub")
            and bool(store.conversations.list(client_id=client_id))
        )

    await async_wait_for(every_branch_at_work, timeout=90, interval=0.1)
    os.kill(await _coordinator_pid(run_id), signal.SIGKILL)

    run = await wait_for_run(run_id, 150)

    assert run.status is RunStatus.COMPLETED, run.error
    assert [e.type for e in run.events] == ["workflow_started", RESUMED_EVENT, "workflow_completed"]
    runs = {n: len((tmp_path / n).read_text().splitlines()) for n in ("done", "idem", "once")}
    assert runs == {"done": 1, "idem": 2, "once": 1}  # done never again; once never twice
    history = {r.node_id: r for r in get_history(run_id)}
    assert history["once"].state == "failed"
    assert history["once"].error is not None
    assert history["once"].error.message.startswith("interrupted: ")
    assert history["idem"].output == {"runs": 2}
    # The agent node re-attached to its turn: one conversation, one question, one answer.
    [conversation] = store.conversations.list(client_id=client_id)
    messages = store.messages.list(conversation.id)
    assert [m.role for m in messages] == [MessageRole.USER, MessageRole.AGENT]
    assert history["ask"].output["answer"] == "here: are you there?"
    # The subworkflow node re-attached to its child run: one child, completed.
    [child] = store.workflow_runs.children(run_id)
    assert child.id == history["sub"].child_run_id and child.status is RunStatus.COMPLETED
    assert run.output["branches"] == [
        {"runs": 1},
        {"runs": 2},
        history["ask"].output,
        {"slept": 4.0},
    ]

    def coordinator_left() -> bool:  # the new incarnation exits once the run has ended
        try:
            ray.get_actor(workflow_actor_name(run_id), namespace=NAMESPACE)
        except ValueError:
            return True
        return False

    await async_wait_for(coordinator_left, timeout=30)
