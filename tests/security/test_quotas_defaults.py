"""Defaults that hold under abuse, over real gateways on the session's Ray: a client nobody gave
a quota is still bounded (conversations, turns, WebSockets, workflow runs and subworkflows,
listings, cron intervals, run sizes).

Most tests use a second gateway deployed with tight defaults (``WONDER_QUOTA_DEFAULT_*``), the
way an operator configures one; the last ones use the session's gateway and the shipped defaults.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import (  # the gateway deployed once per session
    alice,  # noqa: F401 - fixture
    error_of,
    gateway_url,  # noqa: F401 - fixture
    http_client,
    unique,
)
from tests.security.flows import put_ok, run_workflow

TIGHT = {
    "WONDER_QUOTA_DEFAULT_CONVERSATIONS": "2",
    "WONDER_QUOTA_DEFAULT_CONCURRENT_TURNS": "1",
    "WONDER_QUOTA_DEFAULT_CONCURRENT_WEBSOCKETS": "1",
    "WONDER_QUOTA_DEFAULT_CONCURRENT_RUNS": "1",
    "WONDER_LIST_MAX_ITEMS": "3",
}


@pytest.fixture(scope="module")
def limits_url(ray_cluster: Cluster, serve_port: int) -> Iterator[str]:
    from ray import serve

    from cluster.gateway import build_gateway_app

    serve.run(
        build_gateway_app({**ray_cluster.env, **TIGHT}), name="limits", route_prefix="/limits"
    )
    url = f"http://127.0.0.1:{serve_port}/limits"
    with http_client(url, None) as anonymous:
        deadline = time.monotonic() + 60
        while anonymous.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
    try:
        yield url
    finally:
        serve.delete("limits")


@pytest.fixture
def carol(limits_url: str, ray_cluster: Cluster) -> Iterator[tuple[httpx.Client, str]]:
    """A fresh client with no stored quota, on the tight gateway; and its key."""
    _, key = make_client(ray_cluster.store, "carol")
    with http_client(limits_url, key) as client:
        yield client, key


def test_conversations_and_turns_are_bounded_without_a_stored_quota(
    carol: tuple[httpx.Client, str],
) -> None:
    client, _ = carol
    assert client.get("/v1/quota").json() == {}  # nothing stored: the defaults apply
    profile = unique("mp")
    slow = [{"reply": "slow", "delay_s": 20}]
    put_ok(client, f"/v1/model-profiles/{profile}", {"provider": "scripted", "script": slow})
    persona = unique("persona")
    put_ok(client, f"/v1/personas/{persona}", {"system_prompt": "t", "model_profile_id": profile})
    agent = client.post("/v1/agents", json={"name": "a", "persona_ref": {"id": persona}}).json()
    first = client.post("/v1/conversations", json={"agent_id": agent["id"]})
    assert first.status_code == 201
    assert client.post("/v1/conversations", json={}).status_code == 201
    third = client.post("/v1/conversations", json={})
    assert third.status_code == 429 and "conversations" in error_of(third)["message"]

    conv_id = first.json()["id"]
    posted = client.post(f"/v1/conversations/{conv_id}/messages", json={"content": "one"})
    assert posted.status_code == 202, posted.text
    second = client.post(f"/v1/conversations/{conv_id}/messages", json={"content": "two"})
    assert second.status_code == 429 and "concurrent_turns" in error_of(second)["message"]


def test_websockets_are_bounded_without_a_stored_quota(
    carol: tuple[httpx.Client, str], limits_url: str
) -> None:
    from websockets.sync.client import connect

    client, key = carol
    conv_id = client.post("/v1/conversations", json={}).json()["id"]
    ws_url = limits_url.replace("http://", "ws://") + f"/v1/conversations/{conv_id}/stream"
    headers = {"Authorization": f"Bearer {key}"}
    with connect(ws_url, additional_headers=headers, proxy=None, open_timeout=30) as first:
        assert json.loads(first.recv(timeout=30))["type"] != "error"
        with connect(ws_url, additional_headers=headers, proxy=None) as second:
            frame = json.loads(second.recv(timeout=30))
            assert frame["type"] == "error" and frame["error"]["code"] == "QUOTA_EXCEEDED"
            with pytest.raises(ConnectionClosed):
                second.recv(timeout=30)


def test_subworkflows_count_toward_the_runs_quota(carol: tuple[httpx.Client, str]) -> None:
    """A workflow fanning out into copies of itself (a fork bomb, here one level deep so that
    even a deployment without the quota stays small) stops at the client's runs quota."""
    client, _ = carol
    bomb = unique("bomb")
    workflow = {
        "nodes": [
            {"id": "fan", "kind": "pass"},
            {
                "id": "again",
                "kind": "subworkflow",
                "target_id": bomb,
                "input_mapping": {"copies": {"const": []}},  # the copies fan out no further
            },
        ],
        "edges": [{"from": "fan", "to": "again", "foreach": "input.copies"}],
    }
    put_ok(client, f"/v1/workflows/{bomb}", workflow)
    run = run_workflow(client, bomb, {"copies": [1, 2, 3, 4]})
    assert run["status"] == "failed", run
    assert run["error"]["code"] == "QUOTA_EXCEEDED" and "concurrent_runs" in run["error"]["message"]
    runs = client.get("/v1/workflow-runs", params={"workflow_id": bomb}).json()["items"]
    assert len(runs) == 1  # no child run was ever stored


def test_listings_are_bounded(carol: tuple[httpx.Client, str]) -> None:
    client, _ = carol
    for _ in range(5):
        put_ok(client, f"/v1/personas/{unique('p')}", {"system_prompt": "t"})
    assert len(client.get("/v1/personas").json()["items"]) == 3


def test_cron_triggers_fire_at_most_every_five_minutes_by_default(
    alice: httpx.Client,  # noqa: F811
) -> None:
    persona = unique("persona")
    put_ok(alice, f"/v1/personas/{persona}", {"system_prompt": "t"})
    body = {"template": "tick", "route": {"persona": persona}}
    refused = alice.post("/v1/triggers", json={**body, "schedule": "* * * * *"})
    assert refused.status_code == 400, refused.text
    assert "WONDER_TRIGGER_MIN_INTERVAL_S" in error_of(refused)["message"]
    accepted = alice.post("/v1/triggers", json={**body, "schedule": "*/5 * * * *"})
    assert accepted.status_code == 201, accepted.text


def test_a_workflow_cannot_ask_for_more_node_executions_than_the_operator_allows(
    alice: httpx.Client,  # noqa: F811
) -> None:
    workflow = {"max_tokens": 1_000_000, "nodes": [{"id": "n", "kind": "pass"}]}
    refused = alice.put(f"/v1/workflows/{unique('wf')}", json=workflow)
    assert refused.status_code == 403, refused.text
    assert "WONDER_WORKFLOW_MAX_NODES_PER_RUN" in error_of(refused)["message"]
