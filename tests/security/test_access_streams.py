"""Streams against a real gateway over WebSocket: keys never in URLs, one-use tickets, and a
member whose access is revoked loses its open streams at once.

- ``?api_key=`` is refused outright (the web console's own requests, in a real browser, are
  checked in tests/browser: the key is in none of their URLs, its stream tickets work once).
- A ticket is refused when used twice, when expired, for another conversation, or for another
  user than the one it was issued for.
- Revoking a member closes its streams of that conversation with 4404 and a reason: at once
  through the replica that revoked, and within a poll through any other path (the store).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from core.ids import utc_now
from core.keys import hash_key
from core.store.stream_tickets import StreamTicket
from tests.conftest import Cluster
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(300)


@dataclass
class App:
    api: httpx.Client
    key: str
    client_id: str
    ws_base: str
    conv: str = ""

    def as_user(self, user: str | None, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"X-Wonder-User": user} if user else {}
        return self.api.request(method, path, headers=headers, **kw)

    def ticket(self, user: str | None, conversation_id: str | None = None) -> str:
        body = {"conversation_id": conversation_id or self.conv}
        issued = self.as_user(user, "POST", "/v1/stream-tickets", json=body)
        assert issued.status_code == 201, issued.text
        assert issued.json()["user_id"] == user
        return str(issued.json()["ticket"])

    def stream_url(self, query: str = "", conversation_id: str | None = None) -> str:
        return f"{self.ws_base}/v1/conversations/{conversation_id or self.conv}/stream{query}"


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def app(gateway_url: str, ray_cluster: Cluster) -> Iterator[App]:
    store = ray_cluster.store
    client_id, key = make_client(store, "streams")
    agent = make_agent(store, client_id, scripted_profile(store))
    with http_client(gateway_url, key) as api:
        made = App(api, key, client_id, gateway_url.replace("http://", "ws://"))
        created = made.as_user("own", "POST", "/v1/conversations", json={"agent_id": agent.id})
        made.conv = created.json()["id"]
        for user, level in (("reader-u", "reader"), ("writer-u", "writer")):
            path = f"/v1/conversations/{made.conv}/members/{user}"
            assert made.as_user("own", "PUT", path, json={"level": level}).status_code == 200
        yield made


def open_ws(url: str, headers: dict[str, str] | None = None) -> ClientConnection:
    return connect(url, additional_headers=headers or {}, proxy=None, open_timeout=30)


def until_subscribed(ws: ClientConnection) -> None:
    while json.loads(ws.recv(timeout=30))["type"] != "subscribed":
        pass


def refusal(ws: ClientConnection) -> tuple[int, str, dict[str, Any]]:
    """Read to the close: its code, its reason, and the last error frame."""
    frames: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            frames.append(json.loads(ws.recv(timeout=30)))
    received = closed.value.rcvd
    assert received is not None, frames
    errors = [f for f in frames if f.get("type") == "error"]
    assert errors, frames
    return received.code, received.reason, errors[-1]["error"]


def test_a_key_in_the_url_is_refused(app: App) -> None:
    with open_ws(app.stream_url(f"?api_key={app.key}")) as ws:
        code, reason, error = refusal(ws)
    assert code == 4401 and error["code"] == "UNAUTHORIZED"
    assert "refused in URLs" in error["message"] and "refused in URLs" in reason
    # A ticket does not make a key in the URL acceptable either.
    query = f"?ticket={app.ticket(None)}&api_key={app.key}"
    with open_ws(app.stream_url(query)) as ws:
        assert refusal(ws)[0] == 4401


def test_a_ticket_opens_one_stream_once_as_its_user(app: App) -> None:
    ticket = app.ticket("reader-u")
    with open_ws(app.stream_url(f"?ticket={ticket}")) as ws:  # no header: the ticket is all
        until_subscribed(ws)
        ws.send(json.dumps({"type": "message", "content": "may I?", "id": "m1"}))
        frame = json.loads(ws.recv(timeout=30))
        while frame.get("type") != "error":
            frame = json.loads(ws.recv(timeout=30))
        assert frame["error"]["code"] == "PERMISSION_DENIED"  # it acts as reader-u: a reader
        assert "reader-u is a reader" in frame["error"]["message"]
    with open_ws(app.stream_url(f"?ticket={ticket}")) as ws:  # the same ticket again
        code, _reason, error = refusal(ws)
    assert code == 4401 and "already used" in error["message"]


def test_tickets_expired_mismatched_or_forged_are_refused(app: App, ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    other = app.as_user("own", "POST", "/v1/conversations", json={}).json()["id"]
    cases = [
        (app.stream_url(f"?ticket={app.ticket(None, other)}"), "another conversation"),
        (app.stream_url(f"?ticket={app.ticket('reader-u')}&user_id=own"), "issued for reader-u"),
        (app.stream_url("?ticket=wst_forged"), "unknown"),
        (app.stream_url(f"?ticket={quote(app.key)}"), "invalid stream ticket"),  # a key is none
    ]
    # One that expired unused (stored as the gateway stores them, its time already past; issuing
    # any ticket sweeps expired ones, so it is stored last).
    expired = "wst_" + "e" * 43
    bound = StreamTicket(
        client_id=app.client_id,
        key_hash=hash_key(app.key),
        user_id=None,
        conversation_id=app.conv,
        expires_at=utc_now() - timedelta(seconds=1),
    )
    store.stream_tickets.issue(hash_key(expired), bound, utc_now() - timedelta(seconds=31))
    cases.append((app.stream_url(f"?ticket={expired}"), "expired"))
    for url, fragment in cases:
        with open_ws(url) as ws:
            code, _reason, error = refusal(ws)
        assert code == 4401 and fragment in error["message"], (url, error)
    # A ticket is refused to a user who may not follow the conversation, and its key's
    # revocation makes an unused ticket worthless.
    refused = app.as_user(
        "stranger", "POST", "/v1/stream-tickets", json={"conversation_id": app.conv}
    )
    assert refused.status_code == 404
    _, second_key = make_client(store, "streams-other")
    with http_client(str(app.api.base_url), second_key) as other_client:
        body = {"conversation_id": app.conv}  # another client's conversation
        assert other_client.post("/v1/stream-tickets", json=body).status_code == 404


def test_revoking_a_member_closes_its_streams(app: App, ray_cluster: Cluster) -> None:
    members = f"/v1/conversations/{app.conv}/members"
    headers = {"Authorization": f"Bearer {app.key}", "X-Wonder-User": "reader-u"}
    # Through the gateway's own route: closed at once, with a close code and a reason.
    with open_ws(app.stream_url(), headers) as ws:
        until_subscribed(ws)
        assert app.as_user("own", "DELETE", f"{members}/reader-u").status_code == 200
        code, reason, error = refusal(ws)
    assert code == 4404 and error["code"] == "NOT_FOUND"
    assert error["message"] == f"user reader-u is no longer a member of conversation {app.conv}"
    assert reason.startswith("user reader-u is no longer a member")
    # Revoked anywhere else (another replica, the store): the replica's poll finds it.
    with open_ws(app.stream_url(f"?ticket={app.ticket('writer-u')}")) as ws:
        until_subscribed(ws)
        assert ray_cluster.store.members.revoke(app.conv, "writer-u")
        code, _reason, error = refusal(ws)
    assert code == 4404 and "writer-u is no longer a member" in error["message"]
