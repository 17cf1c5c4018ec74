"""Per-client libraries over the real gateway (issue 13): each client's own objects, the system
library read-only to all, references that say whose object they mean, and agents whose "latest"
follows only their own client's or the system's versions — through real Conversation actors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.domain import Persona
from core.ids import utc_now
from core.store.library import SYSTEM
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, error_of, http_client, unique


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


class Tenant:
    def __init__(self, client_id: str, api: httpx.Client) -> None:
        self.id = client_id
        self.api = api


@pytest.fixture
def tenants(gateway_url: str, ray_cluster: Cluster) -> Iterator[tuple[Tenant, Tenant]]:
    (a_id, a_key), (b_id, b_key) = (make_client(ray_cluster.store, n) for n in ("lib-a", "lib-b"))
    with http_client(gateway_url, a_key) as a, http_client(gateway_url, b_key) as b:
        yield Tenant(a_id, a), Tenant(b_id, b)


def put(tenant: Tenant, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = tenant.api.put(path, json=body)
    assert response.status_code == status, response.text
    return dict(response.json())


def versions(tenant: Tenant, path: str, **params: str) -> list[int]:
    response = tenant.api.get(f"{path}/versions", params=params)
    assert response.status_code == 200, response.text
    return [v["version"] for v in response.json()["items"]]


def system_persona(cluster: Cluster) -> str:
    persona_id = unique("sys")
    cluster.store.personas.put(Persona(id=persona_id, system_prompt="shipped"), utc_now())
    return persona_id


def test_the_system_library_is_read_only_to_every_client(
    tenants: tuple[Tenant, Tenant], ray_cluster: Cluster
) -> None:
    a, b = tenants
    persona_id = system_persona(ray_cluster)
    path = f"/v1/personas/{persona_id}"
    for tenant in (a, b):
        read = tenant.api.get(path).json()
        assert read["owner"] == SYSTEM and read["system_prompt"] == "shipped"
        assert persona_id in {p["id"] for p in tenant.api.get("/v1/personas").json()["items"]}
    for body in ({"system_prompt": "hijacked"}, {"system_prompt": "x", "owner": "system"}):
        refused = a.api.put(path, json=body)
        assert refused.status_code == 403, refused.text
        assert "system library, which is read-only" in error_of(refused)["message"]
    refused = a.api.put(
        f"/v1/personas/{unique('p')}", json={"system_prompt": "x", "owner": "system"}
    )
    assert refused.status_code == 403
    assert versions(b, path) == [1] and b.api.get(path).json()["system_prompt"] == "shipped"


def test_a_clients_objects_are_its_own(tenants: tuple[Tenant, Tenant]) -> None:
    a, b = tenants
    persona_id = unique("mine")
    path = f"/v1/personas/{persona_id}"
    stored = put(a, path, {"system_prompt": "a's"})
    assert stored["owner"] == a.id and stored["version"] == 1
    assert put(a, path, {**stored, "system_prompt": "a's, v2"})["version"] == 2  # round trip

    # Another client: not found, whatever it asks; its own object of that id is separate.
    for response in (
        b.api.get(path),
        b.api.get(f"{path}/versions"),
        b.api.get(path, params={"owner": a.id}),
        a.api.get(path, params={"owner": b.id}),
    ):
        assert response.status_code == 404, response.text
    refused = b.api.put(path, json={"system_prompt": "b's", "owner": a.id})
    assert refused.status_code == 404, refused.text
    assert put(b, path, {"system_prompt": "b's"})["owner"] == b.id
    assert versions(a, path) == [1, 2] and versions(b, path) == [1]
    assert a.api.get(path).json()["system_prompt"] == "a's, v2"
    listed = {(p["id"], p["owner"]) for p in a.api.get("/v1/personas").json()["items"]}
    assert (persona_id, a.id) in listed and (persona_id, b.id) not in listed


def test_agent_references_say_whose_persona(
    tenants: tuple[Tenant, Tenant], ray_cluster: Cluster
) -> None:
    a, b = tenants
    sys_id, own_id = system_persona(ray_cluster), unique("own")
    put(a, f"/v1/personas/{own_id}", {"system_prompt": "a's"})
    cases = [
        ({"id": sys_id}, 201, SYSTEM),
        ({"id": own_id}, 201, a.id),
        ({"id": sys_id, "owner": "system"}, 201, SYSTEM),
        ({"id": own_id, "owner": "system"}, 404, "not found"),
        ({"id": own_id, "owner": b.id}, 404, f"library {b.id} not found"),
    ]
    for ref, status, expected in cases:
        created = a.api.post("/v1/agents", json={"name": "x", "persona_ref": ref})
        assert created.status_code == status, (ref, created.text)
        if status == 201:
            assert created.json()["persona_ref"]["owner"] == expected
        else:
            assert expected in error_of(created)["message"]
    refused = b.api.post("/v1/agents", json={"name": "x", "persona_ref": {"id": own_id}})
    assert refused.status_code == 404 and "not found" in error_of(refused)["message"]


def _scripted_persona(tenant: Tenant, persona_id: str, reply: str, tool_ids: list[str]) -> None:
    profile = unique("mp")
    script = [
        {
            "match": "calculate",
            "tool_calls": [{"name": "calc", "arguments": {"expression": "6*7"}}],
        },
        {"match": "", "reply": f"{reply}: {{{{last_tool}}}}"},
    ]
    put(tenant, f"/v1/model-profiles/{profile}", {"provider": "scripted", "script": script})
    persona = {"system_prompt": reply, "model_profile_id": profile, "tool_ids": tool_ids}
    put(tenant, f"/v1/personas/{persona_id}", persona)


def _calc_tool(tenant: Tenant, tool_id: str, task_id: str) -> None:
    task = {"actions": [{"kind": "python", "params": {"callable": "library.callables:calculate"}}]}
    put(tenant, f"/v1/tasks/{task_id}", task)
    tool = {
        "name": "calc",
        "description": "arithmetic",
        "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}},
        "target_type": "task",
        "target_id": task_id,
    }
    put(tenant, f"/v1/tools/{tool_id}", tool)


def _reply(tenant: Tenant, agent_id: str, content: str) -> str:
    conv = tenant.api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    posted = tenant.api.post(f"/v1/conversations/{conv}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = posted.json()["turn_id"]

    def ended() -> dict[str, Any] | None:
        turn = tenant.api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json()
        return turn if turn.get("status") in ("completed", "failed") else None

    turn = wait_for(ended, timeout=90, interval=0.2)
    assert turn["status"] == "completed", turn
    messages = tenant.api.get(f"/v1/conversations/{conv}/messages").json()["items"]
    return str(messages[-1]["content"])


def test_agents_follow_only_their_own_clients_latest(tenants: tuple[Tenant, Tenant]) -> None:
    """Two clients with a persona, tool and task of the same ids: each agent's turn runs its own
    client's latest versions, and a new version by the other client changes nothing."""
    a, b = tenants
    persona_id, tool_id, task_id = unique("p"), unique("tool"), unique("task")
    _calc_tool(a, tool_id, task_id)
    _scripted_persona(a, persona_id, "from a", [tool_id])
    agent = a.api.post("/v1/agents", json={"name": "a", "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    reply = _reply(a, agent_id, "please calculate")
    assert reply.startswith("from a:") and "42" in reply

    # b stores objects with the same ids (its own library): a's agent does not follow them.
    task = {"actions": [{"kind": "python", "params": {"callable": "library.callables:echo"}}]}
    put(b, f"/v1/tasks/{task_id}", task, status=200)
    _scripted_persona(b, persona_id, "from b", [])
    reply = _reply(a, agent_id, "please calculate")
    assert reply.startswith("from a:") and "42" in reply
    # a's own new version is followed.
    _scripted_persona(a, persona_id, "from a v2", [tool_id])
    assert _reply(a, agent_id, "hello").startswith("from a v2")
