"""``GET /v1/operations``: the cluster's figures for operator keys only, over the real app
(FastAPI's TestClient) and a real SQLite store holding model call records."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.domain import Usage
from core.ids import new_id, utc_now
from core.model_calls import CallSource, CallTimings, ModelCallRecord
from core.store import Store
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.factories import make_client
from tests.inprocess import InProcessCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})
    yield cluster
    cluster.close()


def gateway(cluster: InProcessCluster, key: str) -> TestClient:
    context = GatewayContext(
        store=cluster.store,
        conversations=cluster,  # type: ignore[arg-type]
        workflows=cluster.workflows,
        memory=cluster.memory,
        settings_env=cluster.settings_env,
    )
    client = TestClient(create_api(context), raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {key}"
    return client


def record(store: Store, client_id: str, minutes_ago: float, completion: int, ok: bool) -> None:
    at = utc_now() - timedelta(minutes=minutes_ago)
    call = ModelCallRecord(
        id=new_id("call"),
        source=CallSource(client_id=client_id),
        purpose="answer",
        provider="scripted",
        model="script",
        usage=Usage(prompt_tokens=10, completion_tokens=completion),
        status="ok" if ok else "error",
        timings=CallTimings(started_at=at, duration_s=0.1),
        created_at=at,
    )
    with store.db.begin() as conn:
        store.records.insert_calls([call], conn)


def test_operations_are_an_operators_and_count_every_clients_recent_calls(
    cluster: InProcessCluster,
) -> None:
    store = cluster.store
    alice, alice_key = make_client(store, "alice")
    bob, _ = make_client(store, "bob")
    _, admin_key = make_client(store, "ops")
    store.admin_keys.add(admin_key, utc_now())
    record(store, alice, 1, 30, ok=True)
    record(store, bob, 2, 60, ok=False)
    record(store, bob, 90, 1000, ok=True)  # outside the window

    # Any other key: 403, saying what it needs; nothing of the cluster in the answer.
    refused = gateway(cluster, alice_key).get("/v1/operations")
    assert refused.status_code == 403, refused.text
    assert "admin key" in refused.json()["error"]["message"]

    ops = gateway(cluster, admin_key)
    got = ops.get("/v1/operations", params={"window_s": 600})
    assert got.status_code == 200, got.text
    body = got.json()
    totals = body["model_calls"]["totals"]
    assert (totals["calls"], totals["failed_calls"], totals["completion_tokens"]) == (2, 1, 90)
    assert body["model_calls"]["calls_per_minute"] == pytest.approx(2 * 60 / 600)
    assert body["model_calls"]["completion_tokens_per_s"] == pytest.approx(90 / 600)
    # Without a cluster view (no Ray here) the figures it would give are null, with a note.
    assert body["residency"] is None and body["deployments"] is None
    assert body["notes"] == ["cluster figures: this gateway runs without a cluster view"]
    assert body["dashboard_port"] == 8265

    # Bad queries are 422 with the API's error shape.
    for params in ({"window_s": 5}, {"window_s": "soon"}, {"window_s": 10**9}, {"other": 1}):
        bad = ops.get("/v1/operations", params=params)
        assert bad.status_code == 422, (params, bad.text)
        assert {"code", "message", "retriable"} <= set(bad.json()["error"])
