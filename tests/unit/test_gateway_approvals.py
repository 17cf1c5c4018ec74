"""The approvals routes and the stream's ``approval`` frame, on the real app over a real store with
real in-process Conversation actors (``tests.inprocess``, scripted model): list what waits, decide
it (approve, edit, deny), the refusals (bad bodies and edits 422, another client's or a
non-member's 404, decided twice 409), and the same decision over the WebSocket."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from actors.conversation import steps
from core.domain import ApprovalPolicy
from core.retry import RetryPolicy
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.factories import make_agent, scripted_profile, task_tool
from tests.inprocess import InProcessCluster
from tests.unit.test_gateway_api import add_client

pytestmark = pytest.mark.timeout(120)

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 40}},
    "required": ["text"],
    "additionalProperties": False,
}
SCRIPT = [
    {"match": "go", "tool_calls": [{"name": "send", "arguments": {"text": "hello"}}]},
    {"match": "denied", "reply": "not sent"},
    {"match": "text", "reply": "sent: {{last_tool}}"},
]


class Api:
    def __init__(self, cluster: InProcessCluster, client: TestClient, other: TestClient) -> None:
        self.cluster, self.client, self.other = cluster, client, other

    def conversation(self, user: str | None = None) -> str:
        store = self.cluster.store
        echo = [{"kind": "python", "params": {"callable": "library.callables:echo"}}]
        tool = task_tool(store, "send", echo, SCHEMA, approval=ApprovalPolicy(timeout_s=600))
        found = store.keys.find(self.client.headers["Authorization"].removeprefix("Bearer "))
        assert found is not None
        agent = make_agent(store, found.client_id, scripted_profile(store, SCRIPT), [tool])
        headers = {"X-Wonder-User": user} if user else {}
        made = self.client.post("/v1/conversations", json={"agent_id": agent.id}, headers=headers)
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def pending(self, conv: str, user: str | None = None) -> list[dict[str, Any]]:
        headers = {"X-Wonder-User": user} if user else {}
        listed = self.client.get(f"/v1/conversations/{conv}/approvals", headers=headers)
        assert listed.status_code == 200, listed.text
        return list(listed.json()["items"])

    def waiting(self, conv: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            items = self.pending(conv)
            if items:
                [item] = items
                return item
            time.sleep(0.05)
        raise AssertionError("no approval was requested")

    def turn(self, conv: str, turn_id: str) -> dict[str, Any]:
        got = self.client.get(f"/v1/conversations/{conv}/turns/{turn_id}")
        assert got.status_code == 200, got.text
        return dict(got.json())

    def ended(self, conv: str, turn_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            turn = self.turn(conv, turn_id)
            if turn["status"] != "active":
                return turn
            time.sleep(0.05)
        raise AssertionError("the turn did not end")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setattr(steps, "LLM_CALL", RetryPolicy(3, (0.01, 0.01), 5.0))
    env = {"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"}
    cluster = InProcessCluster(env)
    context = GatewayContext(
        store=cluster.store,
        conversations=cluster,  # type: ignore[arg-type]
        workflows=cluster.workflows,
        memory=cluster.memory,
        settings_env=env,
    )
    app = create_api(context)
    key, other_key = add_client(cluster.store, "owner"), add_client(cluster.store, "other")
    with (
        TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client,
        TestClient(app, headers={"Authorization": f"Bearer {other_key}"}) as other,
    ):
        yield Api(cluster, client, other)
    cluster.close()


def test_a_waiting_call_is_listed_then_approved_once(api: Api) -> None:
    conv = api.conversation()
    posted = api.client.post(f"/v1/conversations/{conv}/messages", json={"content": "go"})
    assert posted.status_code == 202, posted.text
    turn_id = posted.json()["turn_id"]
    item = api.waiting(conv)
    assert item["tool"] == "send" and item["arguments"] == {"text": "hello"}
    assert item["timeout_s"] == 600 and item["on_timeout"] == "deny" and item["expires_at"]
    assert api.turn(conv, turn_id)["awaiting_approval"] is True
    path = f"/v1/conversations/{conv}/approvals/{item['approval_id']}"
    # Another client's key: as if there were no such conversation.
    assert api.other.get(f"/v1/conversations/{conv}/approvals").status_code == 404
    assert api.other.post(path, json={"decision": "approve"}).status_code == 404
    # Bodies that say nothing valid (422), and edits the tool's schema refuses (400).
    for bad, status in (
        ({"decision": "maybe"}, 422),
        ({"decision": "edit"}, 422),
        ({"decision": "approve", "arguments": {"text": "x"}}, 422),
        ({"decision": "edit", "arguments": {"text": "x" * 80}}, 400),
        ({"decision": "edit", "arguments": {"nope": 1}}, 400),
    ):
        refused = api.client.post(path, json=bad)
        assert refused.status_code == status, (bad, refused.text)
        assert refused.json()["error"]["code"] == "INVALID_INPUT"
    assert api.client.post(f"{path}x", json={"decision": "approve"}).status_code == 404
    approved = api.client.post(path, json={"decision": "edit", "arguments": {"text": "hi"}})
    assert approved.status_code == 200, approved.text
    assert approved.json()["arguments"] == {"text": "hi"}
    again = api.client.post(path, json={"decision": "deny"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "CONFLICT"
    done = api.ended(conv, turn_id)
    assert done["status"] == "completed" and done["awaiting_approval"] is False
    assert api.pending(conv) == []
    events = api.client.get(f"/v1/conversations/{conv}/events").json()["items"]
    decided = [e for e in events if e["type"] == "approval.decided"]
    assert [d["decision"] for d in decided] == ["edit"]


def test_only_members_who_may_write_decide(api: Api) -> None:
    conv = api.conversation("ana")
    owner = {"X-Wonder-User": "ana"}
    posted = api.client.post(
        f"/v1/conversations/{conv}/messages", json={"content": "go"}, headers=owner
    )
    assert posted.status_code == 202, posted.text
    member = api.client.put(
        f"/v1/conversations/{conv}/members/rui", json={"level": "reader"}, headers=owner
    )
    assert member.status_code == 200, member.text
    item = api.waiting(conv)
    path = f"/v1/conversations/{conv}/approvals/{item['approval_id']}"
    stranger = api.client.post(path, json={"decision": "approve"}, headers={"X-Wonder-User": "zoe"})
    assert stranger.status_code == 404
    reader = api.client.post(path, json={"decision": "approve"}, headers={"X-Wonder-User": "rui"})
    assert reader.status_code == 403
    assert api.pending(conv, "rui") == [item]  # a reader sees what waits
    denied = api.client.post(path, json={"decision": "deny", "reason": "no"}, headers=owner)
    assert denied.status_code == 200, denied.text
    assert api.ended(conv, posted.json()["turn_id"])["status"] == "completed"


def test_a_decision_over_the_stream(api: Api) -> None:
    conv = api.conversation()
    with api.client.websocket_connect(f"/v1/conversations/{conv}/stream") as socket:
        socket.send_json({"type": "message", "content": "go", "id": "m1"})
        requested = None
        while requested is None:
            frame = socket.receive_json()
            if frame["type"] == "approval.requested":
                requested = frame
        assert requested["tool"] == "send" and requested["on_timeout"] == "deny"
        socket.send_json({"type": "approval", "approval_id": "approval_nope", "decision": "deny"})
        socket.send_json(
            {
                "type": "approval",
                "approval_id": requested["approval_id"],
                "decision": "approve",
                "id": "a1",
            }
        )
        seen: list[dict[str, Any]] = []
        while not any(f["type"] == "turn.completed" for f in seen):
            seen.append(socket.receive_json())
    [refused] = [f for f in seen if f["type"] == "error"]
    assert refused["error"]["code"] == "NOT_FOUND"
    [ack] = [f for f in seen if f["type"] == "approval.ack"]
    assert ack["id"] == "a1" and ack["decision"] == "approve"
    assert ack["arguments"] == {"text": "hello"}
    decided = [f for f in seen if f["type"] == "approval.decided"]
    assert decided and decided[0]["decided_by"]
