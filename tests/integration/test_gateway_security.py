"""What an API client can make Wonder run (issue 17), over the real gateway on the session's Ray:
only registered callables, a worker that survives its tasks, test doubles off in production.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    http_client,
    unique,
)


def put_ok(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.put(path, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_callables_are_listed_and_unregistered_ones_refused_at_put(
    alice: httpx.Client,  # noqa: F811
) -> None:
    listed = alice.get("/v1/library/callables")
    assert listed.status_code == 200
    names = {c["name"]: c for c in listed.json()["items"]}
    assert "library.callables:calculate" in names and names["library.callables:sleep"]["async"]
    assert not any(n.startswith("jobs.") for n in names)

    for bad in ("jobs.cli:main", "actors.executor:run_task", "os:system", "{{input.fn}}"):
        task = {"actions": [{"kind": "python", "params": {"callable": bad}}]}
        response = alice.put(f"/v1/tasks/{unique('task')}", json=task)
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["code"] == "INVALID_INPUT" and "is not registered" in error["message"]
        assert "actions.0.params.callable" in error["message"]
    ok = {"actions": [{"kind": "python", "params": {"callable": "library.callables:calculate"}}]}
    put_ok(alice, f"/v1/tasks/{unique('task')}", ok)


def _tool(alice: httpx.Client, name: str, callable_name: str) -> str:  # noqa: F811
    task_id = unique("task")
    put_ok(
        alice,
        f"/v1/tasks/{task_id}",
        {"actions": [{"kind": "python", "params": {"callable": callable_name}}]},
    )
    tool_id = unique("tool")
    put_ok(
        alice,
        f"/v1/tools/{tool_id}",
        {"name": name, "description": name, "target_type": "task", "target_id": task_id},
    )
    return tool_id


def _turn_moves(alice: httpx.Client, conv_id: str, content: str) -> list[dict[str, Any]]:  # noqa: F811
    posted = alice.post(f"/v1/conversations/{conv_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = posted.json()["turn_id"]

    def ended() -> dict[str, Any] | None:
        turn = alice.get(f"/v1/conversations/{conv_id}/turns/{turn_id}").json()
        return turn if turn.get("status") in ("completed", "failed") else None

    turn = wait_for(ended, timeout=90, interval=0.2)
    assert turn["status"] == "completed", turn
    return list(turn["moves"])


def test_a_task_calling_sys_exit_fails_its_tool_call_and_the_pool_keeps_working(
    alice: httpx.Client,  # noqa: F811
) -> None:
    exit_tool = _tool(alice, "quit", "tests.callables:exit_worker")
    pid_tool = _tool(alice, "pid", "tests.callables:worker_pid")
    profile = unique("mp")
    script = [
        {"match": "please quit", "tool_calls": [{"name": "quit", "arguments": {}}]},
        {"match": "please pid", "tool_calls": [{"name": "pid", "arguments": {}}]},
        {"reply": "done: {{last_tool}}"},
    ]
    put_ok(alice, f"/v1/model-profiles/{profile}", {"provider": "scripted", "script": script})
    persona = unique("persona")
    put_ok(
        alice,
        f"/v1/personas/{persona}",
        {"system_prompt": "t", "model_profile_id": profile, "tool_ids": [exit_tool, pid_tool]},
    )
    agent = alice.post("/v1/agents", json={"name": "a", "persona_ref": {"id": persona}})
    conv_id = alice.post("/v1/conversations", json={"agent_id": agent.json()["id"]}).json()["id"]

    pids = []
    for _ in range(2):  # twice: the worker that ran the first exit is the one asked next
        (quit_move,) = [m for m in _turn_moves(alice, conv_id, "please quit") if m["tool_call"]]
        result = quit_move["tool_result"]
        assert result["success"] is False
        assert "tried to stop the worker (SystemExit)" in result["error"]["message"]
        (pid_move,) = [m for m in _turn_moves(alice, conv_id, "please pid") if m["tool_call"]]
        assert pid_move["tool_result"]["success"] is True, pid_move
        pids.append(pid_move["tool_result"]["result"]["pid"])
    assert all(isinstance(p, int) for p in pids)


def test_the_scripted_provider_is_refused_where_test_doubles_are_off(
    ray_cluster: Cluster, serve_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway deployed with the settings ``wonder up`` passes (``Settings.env()`` without the
    operator's WONDER_ALLOW_TEST_DOUBLES) refuses the scripted provider; the suite's allows it."""
    from ray import serve

    from cluster.gateway import build_gateway_app
    from core.settings import load_settings
    from tests.factories import make_client

    monkeypatch.delenv("WONDER_ALLOW_TEST_DOUBLES")  # an operator who did not turn them on
    production = load_settings().env()  # what `wonder up` hands its gateway (cli.deploy)
    assert production["WONDER_ALLOW_TEST_DOUBLES"] == "False"
    serve.run(build_gateway_app(production), name="gateway-prod", route_prefix="/prod")
    try:
        _, key = make_client(ray_cluster.store, "prod")
        with http_client(f"http://127.0.0.1:{serve_port}/prod", key) as client:
            deadline = time.monotonic() + 60
            while client.get("/healthz").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            refused = client.put(
                f"/v1/model-profiles/{unique('mp')}", json={"provider": "scripted"}
            )
            assert refused.status_code == 400, refused.text
            assert "WONDER_ALLOW_TEST_DOUBLES" in error_of(refused)["message"]
            assert (
                client.put(
                    f"/v1/model-profiles/{unique('mp')}", json={"provider": "vllm"}
                ).status_code
                == 200
            )
    finally:
        serve.delete("gateway-prod")
