"""API keys over the real gateway (issue 13): list, create, revoke, rotate, expiry, scopes; a
revoked key fails at once on REST and closes its open WebSockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from core.ids import utc_now
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, error_of, http_client, unique
from tests.integration.test_gateway_stream import open_stream


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def admin(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    """A client's first key: admin scope."""
    _, key = make_client(ray_cluster.store, "keys-admin")
    with http_client(gateway_url, key) as client:
        yield client


def new_key(admin: httpx.Client, **body: Any) -> tuple[dict[str, Any], str]:
    created = admin.post("/v1/keys", json={"name": unique("k"), **body})
    assert created.status_code == 201, created.text
    return created.json()["key"], created.json()["api_key"]


def key_ids(admin: httpx.Client) -> dict[str, str]:
    listed = admin.get("/v1/keys")
    assert listed.status_code == 200, listed.text
    return {k["id"]: k["status"] for k in listed.json()["items"]}


def test_keys_list_create_and_scopes(admin: httpx.Client, gateway_url: str) -> None:
    (first_id,) = key_ids(admin)
    key, secret = new_key(admin, name="mobile app")
    assert key["scope"] == "app" and key["status"] == "active" and key["name"] == "mobile app"
    assert "api_key" not in admin.get(f"/v1/keys/{key['id']}").json()
    assert key_ids(admin) == {first_id: "active", key["id"]: "active"}
    with http_client(gateway_url, secret) as app:
        # An app key works on the client's objects...
        assert app.post("/v1/conversations", json={}).status_code == 201
        # ...but manages neither keys nor the library; nothing it asks for changes anything.
        for method, path, body in [
            ("GET", "/v1/keys", None),
            ("POST", "/v1/keys", {"name": "sneaky", "scope": "admin"}),
            ("POST", f"/v1/keys/{first_id}/revoke", None),
            ("POST", f"/v1/keys/{key['id']}/rotate", None),
            ("PUT", f"/v1/personas/{unique('p')}", {"system_prompt": "x"}),
        ]:
            refused = app.request(method, path, json=body)
            assert refused.status_code == 403, (path, refused.text)
            assert "admin scope" in error_of(refused)["message"]
        assert app.get("/v1/personas").status_code == 200  # reading the library is fine
    assert key_ids(admin) == {first_id: "active", key["id"]: "active"}
    listed = {p["id"] for p in admin.get("/v1/personas").json()["items"]}
    assert not any(p.startswith("p-") for p in listed)


def test_another_clients_keys_are_not_found(
    admin: httpx.Client, gateway_url: str, ray_cluster: Cluster
) -> None:
    key, _ = new_key(admin)
    _, other_secret = make_client(ray_cluster.store, "other")
    with http_client(gateway_url, other_secret) as other:
        for method, path in [
            ("GET", f"/v1/keys/{key['id']}"),
            ("POST", f"/v1/keys/{key['id']}/revoke"),
            ("POST", f"/v1/keys/{key['id']}/rotate"),
        ]:
            response = other.request(method, path)
            assert response.status_code == 404, response.text
        assert key["id"] not in {k["id"] for k in other.get("/v1/keys").json()["items"]}
    assert key_ids(admin)[key["id"]] == "active"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("POST", "/v1/keys", {"scope": "app"}, 422, "body.name"),
        ("POST", "/v1/keys", {"name": "x", "scope": "root"}, 422, "body.scope"),
        ("POST", "/v1/keys", {"name": "x", "colour": 1}, 422, "body.colour"),
        ("POST", "/v1/keys", {"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, 409, "future"),
        ("POST", "/v1/keys", {"name": "x", "expires_at": "2999-01-01T00:00:00"}, 422, "timezone"),
        ("GET", "/v1/keys/not-a-key", None, 422, "path.key_id"),
        ("GET", "/v1/keys/key_000000000000000000000000", None, 404, "not found"),
        ("POST", "/v1/keys/key_000000000000000000000000/revoke", None, 404, "not found"),
        ("POST", "/v1/keys/key_000000000000000000000000/rotate", None, 404, "not found"),
    ],
)
def test_bad_key_requests_are_precise(
    admin: httpx.Client, method: str, path: str, body: Any, status: int, fragment: str
) -> None:
    before = key_ids(admin)
    response = admin.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert fragment in error_of(response)["message"]
    assert key_ids(admin) == before


def test_revoke_and_rotate(admin: httpx.Client, gateway_url: str) -> None:
    key, secret = new_key(admin)
    with http_client(gateway_url, secret) as app:
        assert app.get("/v1/conversations").status_code == 200
        revoked = admin.post(f"/v1/keys/{key['id']}/revoke")
        assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
        refused = app.get("/v1/conversations")
        assert refused.status_code == 401
        assert error_of(refused)["message"] == f"API key {key['id']} was revoked"
    again = admin.post(f"/v1/keys/{key['id']}/revoke")  # idempotent: the first time stays
    assert again.status_code == 200 and again.json()["revoked_at"] == revoked.json()["revoked_at"]
    assert admin.post(f"/v1/keys/{key['id']}/rotate").status_code == 409

    key, secret = new_key(admin, name="rotated")
    rotated = admin.post(f"/v1/keys/{key['id']}/rotate", json={})
    assert rotated.status_code == 201, rotated.text
    successor, new_secret = rotated.json()["key"], rotated.json()["api_key"]
    assert successor["name"] == "rotated" and successor["scope"] == "app" and new_secret != secret
    with http_client(gateway_url, secret) as old, http_client(gateway_url, new_secret) as new:
        assert old.get("/v1/conversations").status_code == 401
        assert new.get("/v1/conversations").status_code == 200

    # A grace period keeps the old key working until its new expiry.
    key, secret = new_key(admin)
    graced = admin.post(f"/v1/keys/{key['id']}/rotate", json={"grace_s": 3600})
    assert graced.status_code == 201
    old_key = admin.get(f"/v1/keys/{key['id']}").json()
    assert old_key["status"] == "active" and old_key["expires_at"] is not None
    with http_client(gateway_url, secret) as old:
        assert old.get("/v1/conversations").status_code == 200
    assert admin.post(f"/v1/keys/{key['id']}/rotate", json={"grace_s": -1}).status_code == 422


def test_expired_keys_are_refused(
    admin: httpx.Client, gateway_url: str, ray_cluster: Cluster
) -> None:
    expiry = (utc_now() + timedelta(days=1)).isoformat()
    key, secret = new_key(admin, expires_at=expiry)
    assert key["expires_at"] is not None
    with http_client(gateway_url, secret) as app:
        assert app.get("/v1/conversations").status_code == 200
        # Time passes: the store says the expiry is behind us.
        ray_cluster.store.keys.expire(key["id"], utc_now() - timedelta(seconds=1))
        refused = app.get("/v1/conversations")
        assert refused.status_code == 401 and "expired at" in error_of(refused)["message"]
    assert key_ids(admin)[key["id"]] == "expired"


def test_the_last_admin_key_cannot_be_revoked(admin: httpx.Client) -> None:
    (first_id,) = key_ids(admin)
    refused = admin.post(f"/v1/keys/{first_id}/revoke")
    assert refused.status_code == 409 and "last working admin key" in error_of(refused)["message"]
    second, second_secret = new_key(admin, scope="admin")
    assert admin.post(f"/v1/keys/{first_id}/revoke").status_code == 200
    assert admin.get("/v1/keys").status_code == 401  # that was this client's own key
    admin.headers["Authorization"] = f"Bearer {second_secret}"
    assert key_ids(admin) == {first_id: "revoked", second["id"]: "active"}
    actions = [e["action"] for e in admin.get("/v1/audit").json()["items"]]
    assert actions.count("key.create") == 1 and actions.count("key.revoke") == 1


def closed_with(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """Every frame until the server closes the stream, and the close code."""
    frames: list[dict[str, Any]] = []
    try:
        while True:
            frames.append(json.loads(ws.recv(timeout=30)))
    except ConnectionClosed as closed:
        return frames, closed.rcvd.code if closed.rcvd else None


def test_revoking_a_key_closes_its_open_streams(admin: httpx.Client, gateway_url: str) -> None:
    key, secret = new_key(admin)
    conv_id = admin.post("/v1/conversations", json={}).json()["id"]
    with (
        open_stream(gateway_url, conv_id, secret) as ws,
        open_stream(gateway_url, conv_id, admin.headers["Authorization"].split()[1]) as bystander,
    ):
        assert json.loads(ws.recv(timeout=30))["type"] in ("subscribed", "conversation_started")
        assert admin.post(f"/v1/keys/{key['id']}/revoke").status_code == 200
        frames, code = closed_with(ws)
        assert code == 4401
        assert frames[-1]["type"] == "error"
        assert frames[-1]["error"]["message"] == f"API key {key['id']} was revoked"
        bystander.send(json.dumps({"type": "ping", "id": "p"}))  # another key's stream goes on
        assert any(json.loads(bystander.recv(timeout=30))["type"] == "pong" for _ in range(3))


def test_a_key_revoked_elsewhere_closes_its_streams_and_posts_nothing(
    admin: httpx.Client, gateway_url: str, ray_cluster: Cluster
) -> None:
    """``wonder keys revoke`` (or another replica) writes the store only: the replica's poll
    finds it; a message sent meanwhile is refused and starts no turn."""
    key, secret = new_key(admin)
    conv_id = admin.post("/v1/conversations", json={}).json()["id"]
    with open_stream(gateway_url, conv_id, secret) as ws:
        ws.recv(timeout=30)
        ray_cluster.store.keys.revoke(key["id"], utc_now())
        ws.send(json.dumps({"type": "message", "content": "still here?"}))
        frames, code = closed_with(ws)
    assert code == 4401 and frames[-1]["error"]["code"] == "UNAUTHORIZED"
    assert not [f for f in frames if f["type"] == "ack"]
    assert admin.get(f"/v1/conversations/{conv_id}/turns").json()["items"] == []
