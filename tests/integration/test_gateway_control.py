"""Steering a live conversation over real HTTP: cancel, policy, participants (loop-in)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client
from tests.integration.test_gateway_stream import scripted_agent


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def api(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(gateway_url, make_client(ray_cluster.store, "steerer")[1]) as client:
        yield client


def _turn_status(api: httpx.Client, conv_id: str, turn_id: str) -> str:
    return str(api.get(f"/v1/conversations/{conv_id}/turns/{turn_id}").json()["status"])


def test_cancel_a_turn_and_set_the_policy(api: httpx.Client) -> None:
    agent = scripted_agent(api, [{"reply": "slow {{last_user}}", "delay_s": 20}])
    conv = api.post("/v1/conversations", json={"agent_id": agent}).json()["id"]
    turn = api.post(f"/v1/conversations/{conv}/messages", json={"content": "hi"}).json()["turn_id"]
    cancelled = api.post(f"/v1/conversations/{conv}/turns/{turn}/cancel", json={"reason": "stop"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "failed"
    assert _turn_status(api, conv, turn) == "failed"

    assert api.put(
        f"/v1/conversations/{conv}/policy", json={"concurrency_policy": "reject"}
    ).json() == {"concurrency_policy": "reject"}
    api.post(f"/v1/conversations/{conv}/messages", json={"content": "busy now"})
    refused = api.post(f"/v1/conversations/{conv}/messages", json={"content": "and now?"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "CONFLICT"

    bad = api.put(f"/v1/conversations/{conv}/policy", json={"concurrency_policy": "sometimes"})
    assert bad.status_code == 422
    assert api.post(f"/v1/conversations/{conv}/turns/turn_nope/cancel").status_code == 404


def test_loop_an_agent_in_and_address_it(api: httpx.Client) -> None:
    host = scripted_agent(api, [{"reply": "host here"}])
    guest = scripted_agent(api, [{"reply": "guest saw: {{history}}"}])
    conv = api.post("/v1/conversations", json={"agent_id": host}).json()["id"]
    first = api.post(f"/v1/conversations/{conv}/messages", json={"content": "PLAN A"}).json()
    wait_for(lambda: _turn_status(api, conv, first["turn_id"]) == "completed", 60)

    joined = api.post(f"/v1/conversations/{conv}/participants", json={"agent_id": guest})
    assert joined.status_code == 201, joined.text
    asked = api.post(
        f"/v1/conversations/{conv}/messages", json={"content": f"@{guest} your view?"}
    ).json()
    wait_for(lambda: _turn_status(api, conv, asked["turn_id"]) == "completed", 60)
    messages = api.get(f"/v1/conversations/{conv}/messages").json()["items"]
    assert messages[-1]["author"] == guest
    assert "PLAN A" in messages[-1]["content"]

    assert api.delete(f"/v1/conversations/{conv}/participants/{guest}").status_code == 200
    assert api.delete(f"/v1/conversations/{conv}/participants/{guest}").status_code == 404
    assert (
        api.post(
            f"/v1/conversations/{conv}/participants", json={"agent_id": "agent_of_someone_else"}
        ).status_code
        == 404
    )


def test_delete_stops_live_turns_before_removing_rows(
    api: httpx.Client, ray_cluster: Cluster
) -> None:
    import time

    agent = scripted_agent(api, [{"reply": "too late", "delay_s": 3}])
    conv = api.post("/v1/conversations", json={"agent_id": agent}).json()["id"]
    api.post(f"/v1/conversations/{conv}/messages", json={"content": "slow one"})
    deleted = api.delete(f"/v1/conversations/{conv}")
    assert deleted.status_code == 200, deleted.text
    assert conv in deleted.json()["deleted"]
    time.sleep(4)  # the cancelled turn would have answered by now
    store = ray_cluster.store
    assert store.messages.list(conv) == []
    assert store.events.list(conv) == []
    assert store.turns.list(conv) == []
    assert api.get(f"/v1/conversations/{conv}").status_code == 404
