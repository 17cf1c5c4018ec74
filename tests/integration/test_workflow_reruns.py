"""Re-running an ended workflow run from one of its nodes, over real HTTP on the session's Ray:
the nodes upstream of the chosen one do not run again (their effects are counted in files), the
node and what it reaches do, and the original run is left as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.ids import new_id
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, error_of, http_client

pytestmark = pytest.mark.timeout(300)

COUNT = "tests.callables:count_runs"  # appends a line per run to its ``path``
# Starting a run launches its coordinator: on a loaded machine the answer may take a while.
START_TIMEOUT = httpx.Timeout(120)


@pytest.fixture(scope="module")
def gateway(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def client(gateway: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "reruns")
    with http_client(gateway, key) as http:
        http.timeout = START_TIMEOUT
        yield http


def counting_chain(http: httpx.Client) -> str:
    """``a -> b -> c`` (each counts its runs in ``<input.dir>/<node>.log``), and ``a -> never``
    on a condition no run meets; returns the workflow id."""
    suffix = new_id().lower()
    task_id, workflow_id = f"count-{suffix}", f"chain-{suffix}"
    task = {"actions": [{"kind": "python", "params": {"callable": COUNT}}]}
    assert http.put(f"/v1/tasks/{task_id}", json=task).status_code == 200

    def node(node_id: str, n: str) -> dict[str, Any]:
        mapping = {"path": f"{{{{input.dir}}}}/{node_id}.log", "n": n}
        return {"id": node_id, "kind": "task", "target_id": task_id, "input_mapping": mapping}

    workflow = {
        "nodes": [
            node("a", "input.n"),
            node("b", "nodes.a.n"),
            node("c", "nodes.b.n"),
            node("never", "nodes.a.n"),
        ],
        "edges": [
            {"from": "a", "to": "b"},
            {"from": "b", "to": "c"},
            {"from": "a", "to": "never", "when": "output.n > 1000"},
        ],
        "output_mapping": {"n": "nodes.c.n"},
    }
    response = http.put(f"/v1/workflows/{workflow_id}", json=workflow)
    assert response.status_code == 200, response.text
    return workflow_id


def ended(http: httpx.Client, answer: httpx.Response) -> dict[str, Any]:
    """The run a start or re-run answered with (202), once it has ended."""
    assert answer.status_code == 202, answer.text
    run_id = answer.json()["run"]["id"]

    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = http.get(f"/v1/workflow-runs/{run_id}").json()
        return body if body["run"]["status"] in ("completed", "failed", "cancelled") else None

    return wait_for(done, timeout=180, interval=0.2)


def runs_of(directory: Path) -> dict[str, int]:
    return {p.stem: len(p.read_text().splitlines()) for p in sorted(directory.glob("*.log"))}


def test_a_rerun_from_a_middle_node_runs_it_and_downstream_only(
    client: httpx.Client, tmp_path: Path
) -> None:
    workflow_id = counting_chain(client)
    first = ended(
        client,
        client.post(
            f"/v1/workflows/{workflow_id}/runs", json={"input": {"dir": str(tmp_path), "n": 0}}
        ),
    )
    assert first["run"]["status"] == "completed" and first["run"]["output"] == {"n": 3}
    assert runs_of(tmp_path) == {"a": 1, "b": 1, "c": 1}
    original_id = first["run"]["id"]
    before = client.get(f"/v1/workflow-runs/{original_id}").json()

    rerun = client.post(f"/v1/workflow-runs/{original_id}/reruns", json={"from_node": "b"})
    assert rerun.json()["run"]["rerun_of"]["node_id"] == "b"
    second = ended(client, rerun)
    assert second["run"]["id"] != original_id
    assert second["run"]["status"] == "completed" and second["run"]["output"] == {"n": 3}
    assert second["run"]["rerun_of"] == {"run_id": original_id, "node_id": "b", "node_input": None}
    assert second["run"]["workflow_version"] == first["run"]["workflow_version"]
    # a did not run again (its output was reused); b and c did.
    assert runs_of(tmp_path) == {"a": 1, "b": 2, "c": 2}
    nodes = {n["node_id"]: n for n in second["nodes"]}
    a_original = next(n for n in first["nodes"] if n["node_id"] == "a")
    assert nodes["a"]["reused_from"] == a_original["token_id"]
    assert nodes["a"]["output"] == a_original["output"]
    assert nodes["b"]["reused_from"] is None and nodes["b"]["output"]["runs"] == 2
    assert nodes["c"]["reused_from"] is None and nodes["c"]["state"] == "done"
    assert client.get(f"/v1/workflow-runs/{original_id}").json() == before

    # A new input for the node; a re-run of a re-run.
    again = ended(
        client,
        client.post(
            f"/v1/workflow-runs/{second['run']['id']}/reruns",
            json={"from_node": "c", "input": {"path": str(tmp_path / "c.log"), "n": 40}},
        ),
    )
    assert again["run"]["status"] == "completed" and again["run"]["output"] == {"n": 41}
    assert runs_of(tmp_path) == {"a": 1, "b": 2, "c": 3}
    assert [n["node_id"] for n in again["nodes"] if n["reused_from"]] == ["a", "b"]


def test_rerun_refusals(
    client: httpx.Client, gateway: str, ray_cluster: Cluster, tmp_path: Path
) -> None:
    workflow_id = counting_chain(client)
    run = ended(
        client,
        client.post(
            f"/v1/workflows/{workflow_id}/runs", json={"input": {"dir": str(tmp_path), "n": 0}}
        ),
    )["run"]
    reruns = f"/v1/workflow-runs/{run['id']}/reruns"

    unknown_node = client.post(reruns, json={"from_node": "nope"})
    assert unknown_node.status_code == 404 and "nope" in error_of(unknown_node)["message"]
    unknown_run = client.post("/v1/workflow-runs/run_missing/reruns", json={"from_node": "b"})
    assert unknown_run.status_code == 404
    never = client.post(reruns, json={"from_node": "never"})
    assert never.status_code == 409, never.text
    assert error_of(never)["code"] == "CONFLICT"
    assert "never reached node never" in error_of(never)["message"]
    for bad in (
        {},
        {"from_node": "b", "input": [1]},
        {"from_node": "b c"},
        {"from_node": "b", "x": 1},
    ):
        refused = client.post(reruns, json=bad)
        assert refused.status_code == 422, (bad, refused.text)
    _, other_key = make_client(ray_cluster.store, "reruns-other")
    with http_client(gateway, other_key) as other:
        hidden = other.post(reruns, json={"from_node": "b"})
        assert hidden.status_code == 404 and error_of(hidden)["code"] == "NOT_FOUND"
    assert runs_of(tmp_path) == {"a": 1, "b": 1, "c": 1}  # nothing ran for a refusal
