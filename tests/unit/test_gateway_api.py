"""The gateway's REST API over a real SQLite store, in-process (no Ray): FastAPI's TestClient.

The same behaviours run over real HTTP on Ray Serve in tests/integration/test_gateway.py; these are
the fast, exhaustive table of status codes and error shapes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.domain import Client
from core.ids import new_id, utc_now
from core.ports import MessageAck
from core.store import Store
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext


class NoRuntime:
    """Workflow runs and memories for a gateway that has no cluster behind it (unit tests)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"unit tests of the gateway do not reach {name} (no cluster here)")


def unit_context(store: Store, conversations: Any) -> GatewayContext:
    """A gateway context over a real store and a fake conversations port."""
    return GatewayContext(
        store=store, conversations=conversations, workflows=NoRuntime(), memory=NoRuntime()
    )


class RecordingConversations:
    """A ConversationAccess that records calls (the actor side is tested elsewhere)."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []
        self.completed: list[str] = []

    async def reserved_conversation_id(self) -> str | None:
        return None

    async def post_message(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        source: str = "human",
        reply_to_message_id: str | None = None,
        message_id: str | None = None,
        agent_id: str | None = None,
    ) -> MessageAck:
        self.posted.append((conversation_id, content, author))
        return MessageAck(
            conversation_id=conversation_id, turn_id="turn_1", message_id="msg_1", seq=2
        )

    async def stream_events(
        self, conversation_id: str, after_seq: int, *, marker: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        if False:
            yield {}

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        return None

    async def complete_conversation(self, conversation_id: str) -> None:
        self.completed.append(conversation_id)


def add_client(store: Store, name: str) -> str:
    client_id = new_id("client")
    store.clients.insert(Client(id=client_id, name=name, created_at=utc_now()))
    key = f"wk_{new_id()}"
    store.clients.add_api_key(client_id, key, utc_now())
    return key


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


@pytest.fixture
def access() -> RecordingConversations:
    return RecordingConversations()


@pytest.fixture
def api(store: Store, access: RecordingConversations) -> Iterator[TestClient]:
    app = create_api(unit_context(store, access))
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {add_client(store, 'alice')}"
        yield client


@pytest.fixture
def other(api: TestClient, store: Store) -> TestClient:
    """A second client on the same app."""
    client = TestClient(api.app, raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {add_client(store, 'bob')}"
    return client


PERSONA = {"system_prompt": "You are helpful.", "model_profile_id": "local"}
TOOL = {
    "name": "calculator",
    "description": "Arithmetic",
    "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}}},
    "target_type": "task",
    "target_id": "calculator",
}


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "retriable"} <= set(body["error"]), body
    return body["error"]


# --------------------------------------------------------------------------- auth and health


def test_healthz_needs_no_key(api: TestClient) -> None:
    assert TestClient(api.app).get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}, {"Authorization": ""}],
)
def test_bad_keys_are_401(api: TestClient, headers: dict[str, str]) -> None:
    response = TestClient(api.app).get("/v1/agents", headers=headers)
    assert response.status_code == 401
    assert error_of(response)["code"] == "UNAUTHORIZED"


def test_openapi_and_console(api: TestClient) -> None:
    assert (
        "/v1/conversations/{conversation_id}/messages" in api.get("/openapi.json").json()["paths"]
    )
    assert api.get("/docs").status_code == 200
    assert "Wonder" in api.get("/").text


def test_unknown_route_is_json_404(api: TestClient) -> None:
    response = api.get("/v1/nothing")
    assert response.status_code == 404
    assert error_of(response)["code"] == "NOT_FOUND"


# --------------------------------------------------------------------------- library


def test_persona_versions(api: TestClient) -> None:
    first = api.put("/v1/personas/helper", json=PERSONA)
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 1
    assert api.put("/v1/personas/helper", json=PERSONA).json()["version"] == 1  # unchanged
    second = api.put("/v1/personas/helper", json={**PERSONA, "system_prompt": "Be brief."})
    assert second.json()["version"] == 2
    assert api.get("/v1/personas/helper").json()["system_prompt"] == "Be brief."
    assert api.get("/v1/personas/helper?version=1").json()["system_prompt"] == "You are helpful."
    versions = api.get("/v1/personas/helper/versions").json()["items"]
    assert [v["version"] for v in versions] == [1, 2]
    assert [p["id"] for p in api.get("/v1/personas").json()["items"]] == ["helper"]


def test_library_round_trip_keeps_alias(api: TestClient) -> None:
    stored = api.put("/v1/tools/calc", json={**TOOL, "async": True}).json()
    assert stored["async"] is True
    again = api.put("/v1/tools/calc", json=stored)  # GET → PUT round trip: id/version accepted
    assert again.status_code == 200 and again.json()["version"] == 1


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v1/personas/p", {"model_profile_id": "local"}, 422, "body.system_prompt"),
        ("/v1/personas/p", {**PERSONA, "sytem_prompt": "x"}, 422, "body.sytem_prompt"),
        ("/v1/personas/p", {**PERSONA, "recent_turns_limit": "many"}, 422, "recent_turns_limit"),
        ("/v1/personas/p", {**PERSONA, "id": "other"}, 409, "does not match"),
        ("/v1/personas/p", [1, 2], 422, "body"),
        ("/v1/personas/bad%20id", PERSONA, 422, "path.obj_id"),
        (
            "/v1/tools/t",
            {**TOOL, "input_schema": {"type": "string"}},
            422,
            "must describe an object",
        ),
        ("/v1/tools/t", {**TOOL, "input_schema": {"type": 12}}, 422, "not a valid JSON Schema"),
        ("/v1/tools/t", {**TOOL, "target_type": "rocket"}, 422, "body.target_type"),
        ("/v1/tasks/t", {"actions": []}, 422, "body.actions"),
        ("/v1/model-profiles/m", {"temperature": 9}, 422, "body.temperature"),
    ],
)
def test_bad_library_bodies(
    api: TestClient, path: str, body: Any, status: int, fragment: str
) -> None:
    response = api.put(path, json=body)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["code"] == ("CONFLICT" if status == 409 else "INVALID_INPUT")
    assert not error["retriable"] and fragment in error["message"], error


def test_malformed_json_is_400(api: TestClient) -> None:
    response = api.put(
        "/v1/personas/p",
        content=b'{"system_prompt": ',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "not valid JSON" in error_of(response)["message"]


def test_missing_library_object_is_404(api: TestClient) -> None:
    assert api.get("/v1/personas/ghost").status_code == 404
    assert api.get("/v1/personas/ghost/versions").status_code == 404
    api.put("/v1/personas/p", json=PERSONA)
    response = api.get("/v1/personas/p?version=7")
    assert response.status_code == 404 and "version 7" in error_of(response)["message"]


# --------------------------------------------------------------------------- agents


def test_agents(api: TestClient, other: TestClient) -> None:
    api.put("/v1/personas/helper", json=PERSONA)
    by_ref = api.post("/v1/agents", json={"name": "a", "persona_ref": {"id": "helper"}})
    assert by_ref.status_code == 201, by_ref.text
    inline = api.post("/v1/agents", json={"name": "b", "persona": {"id": "x", **PERSONA}})
    assert inline.status_code == 201, inline.text
    agent_id = by_ref.json()["id"]
    ref = api.get(f"/v1/agents/{agent_id}").json()["persona_ref"]
    # The reference says whose persona it follows: the client's own (issue 13).
    assert ref["id"] == "helper" and ref["version"] is None
    assert ref["owner"] == api.put("/v1/personas/helper", json=PERSONA).json()["owner"]
    assert {a["name"] for a in api.get("/v1/agents").json()["items"]} == {"a", "b"}
    assert other.get(f"/v1/agents/{agent_id}").status_code == 404
    assert other.get("/v1/agents").json()["items"] == []


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"name": "a"}, 422, "exactly one of persona_ref or persona"),
        ({"name": "a", "persona_ref": {"id": "ghost"}}, 404, "persona ghost not found"),
        ({"name": "a", "persona_ref": {"id": "helper", "version": 9}}, 404, "version 9"),
        ({"name": "", "persona_ref": {"id": "helper"}}, 422, "body.name"),
        ({"name": "a", "persona": {"system_prompt": "x"}}, 422, "body.persona.id"),
    ],
)
def test_bad_agent_bodies(api: TestClient, body: Any, status: int, fragment: str) -> None:
    api.put("/v1/personas/helper", json=PERSONA)
    response = api.post("/v1/agents", json=body)
    assert response.status_code == status, response.text
    assert fragment in error_of(response)["message"]


# --------------------------------------------------------------------------- conversations


def make_agent(api: TestClient) -> str:
    api.put("/v1/personas/helper", json=PERSONA)
    return str(
        api.post("/v1/agents", json={"name": "a", "persona_ref": {"id": "helper"}}).json()["id"]
    )


def test_conversation_lifecycle(
    api: TestClient, other: TestClient, access: RecordingConversations
) -> None:
    agent_id = make_agent(api)
    created = api.post("/v1/conversations", json={"agent_id": agent_id, "title": "t"})
    assert created.status_code == 201, created.text
    conv = created.json()
    events = api.get(f"/v1/conversations/{conv['id']}/events").json()["items"]
    assert [(e["seq"], e["type"]) for e in events] == [(1, "conversation_started")]
    assert events[0]["agent_id"] == agent_id

    posted = api.post(f"/v1/conversations/{conv['id']}/messages", json={"content": "hi"})
    assert posted.status_code == 202 and posted.json() == {
        "turn_id": "turn_1",
        "message_id": "msg_1",
        "seq": 2,
    }
    assert access.posted == [(conv["id"], "hi", conv["client_id"])]

    for path in ("", "/events", "/messages", "/turns", "/children"):
        assert other.get(f"/v1/conversations/{conv['id']}{path}").status_code == 404, path
    assert (
        other.post(f"/v1/conversations/{conv['id']}/messages", json={"content": "x"}).status_code
        == 404
    )
    assert other.delete(f"/v1/conversations/{conv['id']}").status_code == 404
    assert other.post(f"/v1/conversations/{conv['id']}/complete").status_code == 404
    assert access.posted == [(conv["id"], "hi", conv["client_id"])]

    assert api.post(f"/v1/conversations/{conv['id']}/complete").status_code == 200
    assert access.completed == [conv["id"]]
    assert api.get(f"/v1/conversations/{conv['id']}/turns").json() == {
        "items": [],
        "next_cursor": None,
    }
    assert api.get(f"/v1/conversations/{conv['id']}/turns/nope").status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"content": ""}, 422, "body.content"),
        ({}, 422, "body.content"),
        ({"content": 5}, 422, "body.content"),
        ({"content": "x", "extra": 1}, 422, "body.extra"),
        ({"content": "x", "user_id": "bad id!"}, 422, "body.user_id"),
    ],
)
def test_bad_message_bodies(api: TestClient, body: Any, status: int, fragment: str) -> None:
    conv = api.post("/v1/conversations", json={}).json()
    response = api.post(f"/v1/conversations/{conv['id']}/messages", json=body)
    assert response.status_code == status, response.text
    assert fragment in error_of(response)["message"]


def test_conversation_with_foreign_agent_is_refused(api: TestClient, other: TestClient) -> None:
    agent_id = make_agent(api)
    response = other.post("/v1/conversations", json={"agent_id": agent_id})
    assert response.status_code == 404
    assert "not found" in error_of(response)["message"]


def test_children_cursor_and_cascade(api: TestClient, store: Store) -> None:
    from core.conversations import create_conversation

    root = api.post("/v1/conversations", json={"title": "root"}).json()
    client_id = root["client_id"]
    kids = [
        create_conversation(store, client_id=client_id, started_by_conversation_id=root["id"])
        for _ in range(5)
    ]
    grandchild = create_conversation(
        store, client_id=client_id, started_by_conversation_id=kids[0].id
    )

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"after_cursor": cursor} if cursor else {})}
        page = api.get(f"/v1/conversations/{root['id']}/children", params=params).json()
        seen += [c["id"] for c in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [k.id for k in kids]

    roots = api.get("/v1/conversations", params={"ancestry": "roots"}).json()["items"]
    assert [c["id"] for c in roots] == [root["id"]]
    children = api.get("/v1/conversations", params={"ancestry": "children"}).json()["items"]
    assert len(children) == 6
    assert api.get("/v1/conversations", params={"ancestry": "cousins"}).status_code == 422
    bad_cursor = api.get("/v1/conversations", params={"after_cursor": "zzz"})
    assert bad_cursor.status_code == 422 and "after_cursor" in error_of(bad_cursor)["message"]
    forged = api.get("/v1/conversations", params={"after_cursor": "zzz." + "A" * 22})
    assert forged.status_code == 404 and "after_cursor" in error_of(forged)["message"]

    deleted = api.delete(f"/v1/conversations/{root['id']}").json()["deleted"]
    assert set(deleted) == {root["id"], grandchild.id, *(k.id for k in kids)}
    assert api.get(f"/v1/conversations/{kids[0].id}").status_code == 404
    assert api.get("/v1/conversations").json() == {"items": [], "next_cursor": None}


def test_completed_conversation_refuses_messages(api: TestClient, store: Store) -> None:
    from core.domain import ConversationStatus

    conv_id = api.post("/v1/conversations", json={}).json()["id"]
    conv = store.conversations.get(conv_id)
    store.conversations.save(conv.model_copy(update={"status": ConversationStatus.COMPLETED}))
    response = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": "hi"})
    assert response.status_code == 409 and error_of(response)["code"] == "CONFLICT"


def test_workflows_are_library_objects(api: TestClient) -> None:
    workflow = {"nodes": [{"id": "a", "kind": "task", "target_id": "calculator"}]}
    response = api.put("/v1/workflows/wf", json=workflow)
    assert response.status_code == 200, response.text
    assert response.json()["version"] == 1
    assert [w["id"] for w in api.get("/v1/workflows").json()["items"]] == ["wf"]
    bad = api.put("/v1/workflows/wf", json={"nodes": []})
    assert bad.status_code == 422 and "body.nodes" in error_of(bad)["message"]
