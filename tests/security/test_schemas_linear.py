"""A client's JSON Schema cannot hold a gateway replica or a conversation actor: patterns run on
RE2 (linear time), patterns RE2 cannot run are refused when stored, and validation runs off the
event loops. Over the real gateway on the session's Ray.

``^(a+)+$`` against ``a…a!`` backtracks exponentially on Python's ``re``: with 34 characters a
backtracking engine would take many minutes, so these tests would not finish on one (no timing
is asserted).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    http_client,
    unique,
)
from tests.security.flows import conversation_with, put_ok, run_turn

CATASTROPHIC = "^(a+)+$"
EVIL_INPUT = "a" * 34 + "!"


def _schema(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}}


def test_patterns_re2_cannot_run_are_refused_at_put_with_their_place(
    alice: httpx.Client,  # noqa: F811
) -> None:
    workflow = {"input_schema": _schema(r"^(a)\1$"), "nodes": [{"id": "n", "kind": "pass"}]}
    refused = alice.put(f"/v1/workflows/{unique('wf')}", json=workflow)
    assert refused.status_code == 422, refused.text
    message = error_of(refused)["message"]
    assert "input_schema/properties/q/pattern" in message and "linear time" in message

    tool = {
        "name": "lookahead",
        "description": "d",
        "target_type": "task",
        "target_id": "t",
        "input_schema": _schema("^(?=a)a$"),
    }
    refused = alice.put(f"/v1/tools/{unique('tool')}", json=tool)
    assert refused.status_code == 422 and "RE2" in error_of(refused)["message"]


def test_a_catastrophic_pattern_in_a_workflow_input_schema_does_not_hold_the_gateway(
    alice: httpx.Client,  # noqa: F811
    gateway_url: str,  # noqa: F811
) -> None:
    workflow_id = unique("wf")
    put_ok(
        alice,
        f"/v1/workflows/{workflow_id}",
        {"input_schema": _schema(CATASTROPHIC), "nodes": [{"id": "n", "kind": "pass"}]},
    )
    refused = alice.post(f"/v1/workflows/{workflow_id}/runs", json={"input": {"q": EVIL_INPUT}})
    assert refused.status_code == 400, refused.text
    assert "does not match" in error_of(refused)["message"]
    with http_client(gateway_url, None) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
    accepted = alice.post(f"/v1/workflows/{workflow_id}/runs", json={"input": {"q": "aaa"}})
    assert accepted.status_code == 202, accepted.text


def test_a_catastrophic_pattern_in_a_tool_schema_does_not_hold_the_conversation(
    alice: httpx.Client,  # noqa: F811
) -> None:
    task_id, tool_id, profile = unique("task"), unique("tool"), unique("mp")
    echo = {"actions": [{"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}]}
    put_ok(alice, f"/v1/tasks/{task_id}", echo)
    tool = {
        "name": "lookup",
        "description": "d",
        "target_type": "task",
        "target_id": task_id,
        "input_schema": _schema(CATASTROPHIC),
    }
    put_ok(alice, f"/v1/tools/{tool_id}", tool)
    script = [
        {"match": "go", "tool_calls": [{"name": "lookup", "arguments": {"q": EVIL_INPUT}}]},
        {"reply": "done: {{last_tool}}"},
    ]
    put_ok(alice, f"/v1/model-profiles/{profile}", {"provider": "scripted", "script": script})
    conv_id = conversation_with(alice, profile, [tool_id])
    turn = run_turn(alice, conv_id, "go")
    assert turn["status"] == "completed", turn
    (move,) = [m for m in turn["moves"] if m["tool_call"]]
    error = move["tool_result"]["error"]
    assert error["code"] == "INVALID_INPUT" and "does not match" in error["message"]
