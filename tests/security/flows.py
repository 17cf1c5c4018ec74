"""What the security tests do over the real gateway: store library objects, run a turn or a
workflow, read back everything a client can see of it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import wait_for
from tests.integration.test_gateway import unique


def put_ok(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.put(path, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def conversation_with(
    client: httpx.Client, profile_id: str, tool_ids: list[str] | None = None
) -> str:
    """A new conversation of an agent whose persona uses ``profile_id`` (and ``tool_ids``)."""
    persona = unique("persona")
    body = {"system_prompt": "t", "model_profile_id": profile_id, "tool_ids": tool_ids or []}
    put_ok(client, f"/v1/personas/{persona}", body)
    agent = client.post("/v1/agents", json={"name": "a", "persona_ref": {"id": persona}})
    assert agent.status_code == 201, agent.text
    created = client.post("/v1/conversations", json={"agent_id": agent.json()["id"]})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def run_turn(
    client: httpx.Client, conv_id: str, content: str, timeout: float = 120
) -> dict[str, Any]:
    """Post ``content`` and wait for its turn to end; the turn as the API shows it."""
    posted = client.post(f"/v1/conversations/{conv_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = posted.json()["turn_id"]

    def ended() -> dict[str, Any] | None:
        turn: dict[str, Any] = client.get(f"/v1/conversations/{conv_id}/turns/{turn_id}").json()
        return turn if turn.get("status") in ("completed", "failed") else None

    return wait_for(ended, timeout=timeout, interval=0.2)


def everything_seen(client: httpx.Client, conv_id: str) -> str:
    """Every event, message and turn of the conversation as one text (to search for leaks)."""
    events = client.get(f"/v1/conversations/{conv_id}/events").text
    messages = client.get(f"/v1/conversations/{conv_id}/messages").text
    turns = client.get(f"/v1/conversations/{conv_id}/turns").text
    return "\n".join([events, messages, turns])


def task_workflow(client: httpx.Client, task: dict[str, Any], inputs: list[str]) -> str:
    """A workflow of one task node taking ``inputs`` from the run input; returns its id."""
    task_id, workflow_id = unique("task"), unique("wf")
    put_ok(client, f"/v1/tasks/{task_id}", task)
    node = {
        "id": "call",
        "kind": "task",
        "target_id": task_id,
        "input_mapping": {name: f"input.{name}" for name in inputs},
    }
    put_ok(client, f"/v1/workflows/{workflow_id}", {"nodes": [node]})
    return workflow_id


def run_workflow(
    client: httpx.Client, workflow_id: str, run_input: dict[str, Any]
) -> dict[str, Any]:
    """Start a run and wait for it to end; the run as the API shows it."""
    started = client.post(f"/v1/workflows/{workflow_id}/runs", json={"input": run_input})
    assert started.status_code == 202, started.text
    run_id = started.json()["run"]["id"]

    def ended() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/workflow-runs/{run_id}").json()
        return body["run"] if body["run"]["status"] in ("completed", "failed") else None

    return wait_for(ended, timeout=120, interval=0.2)
