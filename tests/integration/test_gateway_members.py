"""Users and memberships over the real gateway (issue 13): the app names the acting user with
``X-Wonder-User``; each level may do what the table says, and nothing more; non-members get 404;
listings show only what the user may see; refused requests change nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import Cluster
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.test_gateway import deploy_gateway, error_of, http_client

LEVELS = ("reader", "writer", "manager", "owner")


def open_stream(gateway_url: str, conv_id: str, key: str, user: str) -> ClientConnection:
    return connect(
        f"{gateway_url.replace('http://', 'ws://')}/v1/conversations/{conv_id}/stream",
        additional_headers={"Authorization": f"Bearer {key}", "X-Wonder-User": user},
        proxy=None,
        open_timeout=30,
    )


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


class App:
    """One client's key, acting as its users."""

    def __init__(self, api: httpx.Client, client_id: str, key: str) -> None:
        self.api, self.client_id, self.key = api, client_id, key

    def as_user(self, user: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"X-Wonder-User": user} if user else {}
        return self.api.request(method, path, headers=headers, **kw)


@pytest.fixture
def app(gateway_url: str, ray_cluster: Cluster) -> Iterator[App]:
    client_id, key = make_client(ray_cluster.store, "members")
    with http_client(gateway_url, key) as api:
        yield App(api, client_id, key)


def shared_conversation(app: App, ray_cluster: Cluster) -> str:
    """A conversation the user ``own`` started, shared with one user per level."""
    agent = make_agent(ray_cluster.store, app.client_id, scripted_profile(ray_cluster.store))
    created = app.as_user("own", "POST", "/v1/conversations", json={"agent_id": agent.id})
    assert created.status_code == 201, created.text
    conv = created.json()["id"]
    for level in LEVELS[:-1]:
        granted = app.as_user(
            "own", "PUT", f"/v1/conversations/{conv}/members/{level}-u", json={"level": level}
        )
        assert granted.status_code == 200, granted.text
    return str(conv)


def user_at(level: str | None) -> str:
    return {None: "stranger", "owner": "own"}.get(level, f"{level}-u")


# action → (request, the lowest level allowed)
ACTIONS: dict[str, tuple[str, str, dict[str, Any] | None, str]] = {
    "read conversation": ("GET", "", None, "reader"),
    "read messages": ("GET", "/messages", None, "reader"),
    "read events": ("GET", "/events", None, "reader"),
    "read members": ("GET", "/members", None, "reader"),
    "post a message": ("POST", "/messages", {"content": "hello"}, "writer"),
    "set the policy": ("PUT", "/policy", {"concurrency_policy": "queue"}, "manager"),
    "share as reader": ("PUT", "/members/newcomer", {"level": "reader"}, "manager"),
    "make an owner": ("PUT", "/members/heir", {"level": "owner"}, "owner"),
    "delete it": ("DELETE", "", None, "owner"),
}


def _state(app: App, conv: str) -> dict[str, Any]:
    base = f"/v1/conversations/{conv}"
    return {
        "conversation": app.api.get(base).json(),
        "messages": len(app.api.get(f"{base}/messages").json()["items"]),
        "members": app.api.get(f"{base}/members").json(),
    }


@pytest.mark.parametrize("action", list(ACTIONS))
def test_level_by_action(app: App, ray_cluster: Cluster, action: str) -> None:
    method, suffix, body, lowest = ACTIONS[action]
    conv = shared_conversation(app, ray_cluster)
    path = f"/v1/conversations/{conv}{suffix}"
    for level in (None, *LEVELS):
        allowed = level is not None and LEVELS.index(level) >= LEVELS.index(lowest)
        if allowed:
            continue  # the refusals first: each must leave everything as it was
        before = _state(app, conv)
        refused = app.as_user(user_at(level), method, path, json=body)
        expected = 404 if level is None else 403
        assert refused.status_code == expected, (level, action, refused.text)
        if level is not None:
            assert f"is a {level} of conversation" in error_of(refused)["message"]
        assert _state(app, conv) == before
    for level in LEVELS[LEVELS.index(lowest) :]:
        done = app.as_user(user_at(level), method, path, json=body)
        assert done.status_code < 300, (level, action, done.text)
        if method == "DELETE":
            break  # it is gone


def test_listings_show_only_what_the_user_may_see(app: App, ray_cluster: Cluster) -> None:
    conv = shared_conversation(app, ray_cluster)
    private = app.as_user("own", "POST", "/v1/conversations", json={}).json()["id"]

    def listed(user: str | None) -> set[str]:
        return {c["id"] for c in app.as_user(user, "GET", "/v1/conversations").json()["items"]}

    assert listed("reader-u") == {conv}
    assert listed("own") == {conv, private}
    assert listed("stranger") == set()
    assert {conv, private} <= listed(None)  # the client itself sees everything
    members = app.api.get(f"/v1/conversations/{conv}/members").json()["items"]
    assert {(m["user_id"], m["level"]) for m in members} == {
        ("own", "owner"),
        ("reader-u", "reader"),
        ("writer-u", "writer"),
        ("manager-u", "manager"),
    }


def test_grants_and_revocations(app: App, ray_cluster: Cluster) -> None:
    conv = shared_conversation(app, ray_cluster)
    base = f"/v1/conversations/{conv}/members"
    cases = [
        ("manager-u", "PUT", f"{base}/x", {"level": "admin"}, 422, "body.level"),
        ("manager-u", "PUT", f"{base}/bad%20id", {"level": "reader"}, 422, "path.user_id"),
        ("manager-u", "DELETE", f"{base}/nobody", None, 404, "not a member"),
        ("manager-u", "DELETE", f"{base}/own", None, 403, "transfer needs owner"),
        ("own", "DELETE", f"{base}/own", None, 409, "last owner"),
        ("bad user!", "GET", base, None, 422, "X-Wonder-User"),
    ]
    for user, method, path, body, status, fragment in cases:
        before = app.api.get(base).json()
        response = app.as_user(user, method, path, json=body)
        assert response.status_code == status, (path, response.text)
        assert fragment in error_of(response)["message"]
        assert app.api.get(base).json() == before
    # A manager shares and unshares; the revoked user is a stranger at once.
    assert app.as_user("manager-u", "DELETE", f"{base}/reader-u").status_code == 200
    assert app.as_user("reader-u", "GET", f"/v1/conversations/{conv}").status_code == 404
    # Ownership moves: the old owner steps down once there is another.
    assert app.as_user("own", "PUT", f"{base}/heir", json={"level": "owner"}).status_code == 200
    assert app.as_user("heir", "PUT", f"{base}/own", json={"level": "reader"}).status_code == 200
    assert app.as_user("own", "DELETE", f"/v1/conversations/{conv}").status_code == 403
    actions = [e["action"] for e in app.api.get("/v1/audit").json()["items"]]
    assert actions.count("member.grant") == 5 and actions.count("member.revoke") == 1


def test_a_message_names_its_user_as_author(app: App, ray_cluster: Cluster) -> None:
    conv = shared_conversation(app, ray_cluster)
    path = f"/v1/conversations/{conv}/messages"
    posted = app.as_user("writer-u", "POST", path, json={"content": "hi"})
    assert posted.status_code == 202, posted.text
    mismatch = app.as_user("writer-u", "POST", path, json={"content": "x", "user_id": "other"})
    assert (
        mismatch.status_code == 409 and "acting user is writer-u" in error_of(mismatch)["message"]
    )
    authors = {m["author"] for m in app.api.get(path).json()["items"] if m["role"] == "user"}
    assert authors == {"writer-u"}


def test_the_stream_checks_the_user(app: App, gateway_url: str, ray_cluster: Cluster) -> None:
    conv = shared_conversation(app, ray_cluster)
    with open_stream(gateway_url, conv, app.key, user="stranger") as ws:
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    with open_stream(gateway_url, conv, app.key, user="reader-u") as ws:
        ws.send(json.dumps({"type": "message", "content": "may I?", "id": "m1"}))
        frames = []
        while not frames or frames[-1].get("type") != "error":
            frames.append(json.loads(ws.recv(timeout=30)))
        assert frames[-1]["error"]["code"] == "PERMISSION_DENIED" and frames[-1]["id"] == "m1"
        ws.send(json.dumps({"type": "ping", "id": "p"}))  # the stream goes on
        assert any(json.loads(ws.recv(timeout=30)).get("type") == "pong" for _ in range(5))
    assert app.api.get(f"/v1/conversations/{conv}/messages").json()["items"] == []
