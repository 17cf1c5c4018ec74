"""The gateway over real HTTP on the session's Ray Serve: library, agents, conversations, errors.

Streaming and message posting through the Conversation actor are in ``test_gateway_stream.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.conversations import create_conversation
from tests.conftest import Cluster
from tests.factories import make_client

_deployed: dict[str, str] = {}


def deploy_gateway(cluster: Cluster, port: int) -> str:
    """Deploy the gateway app once per session on the shared Serve; returns its base URL."""
    if "url" not in _deployed:
        from ray import serve

        from cluster.gateway import build_gateway_app

        serve.run(build_gateway_app(cluster.env), name="gateway", route_prefix="/")
        _deployed["url"] = f"http://127.0.0.1:{port}"
    return _deployed["url"]


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


def http_client(url: str, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=30, trust_env=False)


@pytest.fixture
def alice(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "alice")
    with http_client(gateway_url, key) as client:
        yield client


@pytest.fixture
def bob(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "bob")
    with http_client(gateway_url, key) as client:
        yield client


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "retriable"} <= set(body["error"]), body
    return dict(body["error"])


PERSONA = {"system_prompt": "You are helpful.", "model_profile_id": "local"}


def unique(prefix: str) -> str:
    from core.ids import new_id

    return f"{prefix}-{new_id().lower()}"


def test_health_docs_and_auth(gateway_url: str) -> None:
    with http_client(gateway_url, None) as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert anonymous.get("/docs").status_code == 200
        assert "/v1/agents" in anonymous.get("/openapi.json").json()["paths"]
        missing = anonymous.get("/v1/agents")
        assert missing.status_code == 401 and error_of(missing)["code"] == "UNAUTHORIZED"
    with http_client(gateway_url, "wk_not_a_key") as wrong:
        assert wrong.get("/v1/conversations").status_code == 401


def test_library_versions(alice: httpx.Client) -> None:
    pid = unique("persona")
    assert alice.put(f"/v1/personas/{pid}", json=PERSONA).json()["version"] == 1
    changed = alice.put(f"/v1/personas/{pid}", json={**PERSONA, "recent_turns_limit": 5})
    assert changed.status_code == 200 and changed.json()["version"] == 2
    assert alice.get(f"/v1/personas/{pid}").json()["recent_turns_limit"] == 5
    assert (
        alice.get(f"/v1/personas/{pid}", params={"version": 1}).json()["recent_turns_limit"] == 20
    )
    assert [v["version"] for v in alice.get(f"/v1/personas/{pid}/versions").json()["items"]] == [
        1,
        2,
    ]
    assert pid in {p["id"] for p in alice.get("/v1/personas").json()["items"]}

    tid = unique("task")
    task = {"actions": [{"kind": "python", "params": {"callable": "library.callables:calculate"}}]}
    assert alice.put(f"/v1/tasks/{tid}", json=task).status_code == 200
    tool = {
        "name": "calc",
        "description": "arithmetic",
        "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}},
        "target_type": "task",
        "target_id": tid,
        "async": False,
    }
    stored = alice.put(f"/v1/tools/{unique('tool')}", json=tool).json()
    assert stored["async"] is False and stored["version"] == 1
    profile = alice.put(f"/v1/model-profiles/{unique('mp')}", json={"provider": "scripted"})
    assert profile.status_code == 200 and profile.json()["provider"] == "scripted"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("PUT", "/v1/personas/p", {"system_prompt": 3}, 422, "body.system_prompt"),
        ("PUT", "/v1/personas/p", {**PERSONA, "tools": []}, 422, "body.tools: Extra inputs"),
        (
            "PUT",
            "/v1/tools/t",
            {
                "name": "t",
                "description": "d",
                "target_type": "task",
                "target_id": "x",
                "input_schema": {"type": "object", "properties": {"a": {"type": "strnig"}}},
            },
            422,
            "input_schema is not a valid JSON Schema",
        ),
        ("POST", "/v1/agents", {"name": "a", "persona_ref": {"id": "nope-nope"}}, 404, "nope-nope"),
        ("POST", "/v1/conversations", {"agent_id": 5}, 422, "body.agent_id"),
        ("POST", "/v1/conversations", {"titel": "x"}, 422, "body.titel"),
        ("GET", "/v1/conversations?limit=0", None, 422, "query.limit"),
        ("GET", "/v1/conversations?ancestry=all&after_cursor=%%%", None, 422, "after_cursor"),
    ],
)
def test_bad_requests_are_4xx_with_the_field(
    alice: httpx.Client, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    response = alice.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert fragment in error_of(response)["message"]


def test_malformed_json_is_400(alice: httpx.Client) -> None:
    response = alice.post(
        "/v1/conversations", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "not valid JSON" in error_of(response)["message"]


def test_agents_and_isolation(alice: httpx.Client, bob: httpx.Client) -> None:
    pid = unique("persona")
    alice.put(f"/v1/personas/{pid}", json=PERSONA)
    agent = alice.post("/v1/agents", json={"name": "helper", "persona_ref": {"id": pid}})
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    inline = alice.post("/v1/agents", json={"name": "x", "persona": {"id": "inline", **PERSONA}})
    assert inline.status_code == 201
    assert {a["id"] for a in alice.get("/v1/agents").json()["items"]} == {
        agent_id,
        inline.json()["id"],
    }
    assert bob.get(f"/v1/agents/{agent_id}").status_code == 404
    assert bob.get("/v1/agents").json() == {"items": []}
    assert bob.post("/v1/conversations", json={"agent_id": agent_id}).status_code == 404

    conv = alice.post("/v1/conversations", json={"agent_id": agent_id, "title": "t"}).json()
    assert alice.get(f"/v1/conversations/{conv['id']}").json()["agent_id"] == agent_id
    for path in ("", "/messages", "/turns", "/events", "/children"):
        response = bob.get(f"/v1/conversations/{conv['id']}{path}")
        assert response.status_code == 404 and error_of(response)["code"] == "NOT_FOUND", path
    assert (
        bob.post(f"/v1/conversations/{conv['id']}/messages", json={"content": "hi"}).status_code
        == 404
    )
    assert bob.delete(f"/v1/conversations/{conv['id']}").status_code == 404
    assert alice.get(f"/v1/conversations/{conv['id']}").status_code == 200


def test_conversations_children_cursors_and_cascade(
    alice: httpx.Client, ray_cluster: Cluster
) -> None:
    root = alice.post("/v1/conversations", json={"title": "root"})
    assert root.status_code == 201
    root_id, client_id = root.json()["id"], root.json()["client_id"]
    events = alice.get(f"/v1/conversations/{root_id}/events").json()["items"]
    assert [(e["seq"], e["type"]) for e in events] == [(1, "conversation_started")]

    store = ray_cluster.store
    kids = [
        create_conversation(store, client_id=client_id, started_by_conversation_id=root_id, depth=1)
        for _ in range(5)
    ]
    grandchild = create_conversation(
        store, client_id=client_id, started_by_conversation_id=kids[2].id, depth=2
    )
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["after_cursor"] = cursor
        page = alice.get(f"/v1/conversations/{root_id}/children", params=params).json()
        pages.append([c["id"] for c in page["items"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[kids[0].id, kids[1].id], [kids[2].id, kids[3].id], [kids[4].id]]

    roots = alice.get("/v1/conversations", params={"ancestry": "roots"}).json()["items"]
    assert [c["id"] for c in roots] == [root_id]
    children = alice.get("/v1/conversations", params={"ancestry": "children"}).json()["items"]
    assert len(children) == 6
    everything = alice.get("/v1/conversations", params={"limit": 200, "ancestry": "all"})
    everything = everything.json()["items"]
    assert [c["id"] for c in everything] == [root_id, *(k.id for k in kids), grandchild.id]

    deleted = alice.delete(f"/v1/conversations/{root_id}")
    assert deleted.status_code == 200
    assert set(deleted.json()["deleted"]) == {root_id, grandchild.id, *(k.id for k in kids)}
    assert alice.get(f"/v1/conversations/{grandchild.id}").status_code == 404
    assert alice.get("/v1/conversations").json() == {"items": [], "next_cursor": None}
