"""Workflow definitions and runs over real HTTP through the gateway on the session's Serve."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.ids import new_id
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def gateway(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def client(gateway: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "workflow-api")
    with http_client(gateway, key) as http:
        yield http


def put_library(http: httpx.Client) -> str:
    """An echo task and a fan-out workflow over it; returns the workflow id."""
    suffix = new_id().lower()
    task_id, workflow_id = f"echo-{suffix}", f"shout-{suffix}"
    task = {"actions": [{"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}]}
    assert http.put(f"/v1/tasks/{task_id}", json=task).status_code == 200
    workflow = {
        "description": "echo each word, then join them",
        "input_schema": {
            "type": "object",
            "required": ["words"],
            "properties": {"words": {"type": "array", "items": {"type": "string"}}},
        },
        "nodes": [
            {"id": "split", "kind": "pass"},
            {
                "id": "say",
                "kind": "task",
                "target_id": task_id,
                "input_mapping": {"word": "{{item}}!"},
            },
            {
                "id": "join",
                "kind": "pass",
                "join": {"mode": "all"},
                "input_mapping": {"said": "branches"},
            },
        ],
        "edges": [
            {"from": "split", "to": "say", "foreach": "input.words"},
            {"from": "say", "to": "join"},
        ],
        "output_mapping": {"said": "nodes.join.said"},
    }
    response = http.put(f"/v1/workflows/{workflow_id}", json=workflow)
    assert response.status_code == 200, response.text
    assert response.json()["version"] == 1
    return workflow_id


def run_until_done(http: httpx.Client, run_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = http.get(f"/v1/workflow-runs/{run_id}").json()
        return body if body["run"]["status"] in ("completed", "failed", "cancelled") else None

    return wait_for(finished, timeout=60, interval=0.1)


def test_put_a_workflow_start_a_run_and_read_its_history(client: httpx.Client) -> None:
    workflow_id = put_library(client)
    assert client.get(f"/v1/workflows/{workflow_id}").json()["nodes"][1]["id"] == "say"

    started = client.post(
        f"/v1/workflows/{workflow_id}/runs", json={"input": {"words": ["a", "b", "c"]}}
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run"]["id"]

    body = run_until_done(client, run_id)
    assert body["run"]["status"] == "completed"
    assert body["run"]["output"] == {"said": [{"word": "a!"}, {"word": "b!"}, {"word": "c!"}]}
    assert [e["type"] for e in body["run"]["events"]] == ["workflow_started", "workflow_completed"]
    assert [n["node_id"] for n in body["nodes"]] == ["split", "say", "say", "say", "join"]
    assert all(n["state"] == "done" for n in body["nodes"])
    listed = client.get("/v1/workflow-runs", params={"workflow_id": workflow_id}).json()
    assert [r["id"] for r in listed["items"]] == [run_id]


def test_wait_s_answers_with_the_finished_run(client: httpx.Client) -> None:
    workflow_id = put_library(client)
    response = client.post(
        f"/v1/workflows/{workflow_id}/runs", json={"input": {"words": ["x"]}, "wait_s": 30}
    )
    assert response.status_code == 202
    assert response.json()["run"]["status"] == "completed"  # answered when it finished


ERRORS: list[tuple[str, str, dict[str, Any], int, str]] = [
    # (case, workflow (known/unknown), body, status, error code)
    ("unknown workflow", "unknown", {"input": {}}, 404, "NOT_FOUND"),
    ("input against schema", "known", {"input": {"words": "not a list"}}, 400, "INVALID_INPUT"),
    ("unknown body field", "known", {"input": {}, "colour": 1}, 422, "INVALID_INPUT"),
    ("unknown version", "known", {"input": {"words": []}, "version": 9}, 404, "NOT_FOUND"),
]


@pytest.mark.parametrize(
    ("case", "which", "body", "status", "code"), ERRORS, ids=[e[0] for e in ERRORS]
)
def test_start_errors_use_the_error_shape(
    client: httpx.Client, case: str, which: str, body: dict[str, Any], status: int, code: str
) -> None:
    workflow_id = put_library(client) if which == "known" else "no-such-workflow"
    response = client.post(f"/v1/workflows/{workflow_id}/runs", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_runs_belong_to_their_client(
    client: httpx.Client, gateway: str, ray_cluster: Cluster
) -> None:
    workflow_id = put_library(client)
    run_id = client.post(f"/v1/workflows/{workflow_id}/runs", json={"input": {"words": []}}).json()[
        "run"
    ]["id"]
    _, other_key = make_client(ray_cluster.store, "someone-else")
    with http_client(gateway, other_key) as other:
        assert other.get(f"/v1/workflow-runs/{run_id}").status_code == 404
        assert other.post(f"/v1/workflow-runs/{run_id}/cancel", json={}).status_code == 404
        assert other.get("/v1/workflow-runs").json()["items"] == []
    with http_client(gateway, None) as anonymous:
        assert anonymous.get(f"/v1/workflow-runs/{run_id}").status_code == 401
    assert run_until_done(client, run_id)["run"]["output"] == {"said": []}
