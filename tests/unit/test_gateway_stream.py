"""The WebSocket stream in-process (no Ray): forwarding, the ``subscribed`` marker, a broken
source, reconnecting after a seq, bad frames.

A fake ``Conversations`` plays the event feed's part with scripted subscriptions, so each test can
make the event source misbehave in one precise way and check what the client ends up seeing (the
feed's own ordering, dedup and gap filling are tested in ``test_event_feed.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from core.conversations import create_conversation
from core.errors import Unavailable
from core.ports import MessageAck
from core.store import Store
from serving.gateway.app import create_api
from tests.unit.test_gateway_api import add_client, unit_context


def event(seq: int | None, type_: str = "message", **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "conversation_id": "c", **payload}


class ScriptedSubscriptions:
    """Each ``stream_events`` call plays the next script: a list of events, or an exception."""

    def __init__(self, scripts: list[list[Any]]) -> None:
        self.scripts = scripts
        self.subscribed_after: list[int] = []
        self.posted: list[str] = []
        self.yielded = 0
        self.yielded_before_post: list[int] = []

    async def post_message(
        self, conversation_id: str, content: str, author: str, **_kw: Any
    ) -> dict[str, Any]:
        if content == "boom":
            raise Unavailable("actor restarting")
        self.posted.append(content)
        self.yielded_before_post.append(self.yielded)
        return MessageAck(
            conversation_id=conversation_id, turn_id="turn_1", message_id="msg_1", seq=2
        )

    async def stream_events(
        self, conversation_id: str, after_seq: int, *, marker: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        self.subscribed_after.append(after_seq)
        script = self.scripts[min(len(self.subscribed_after), len(self.scripts)) - 1]
        if script and isinstance(script[0], float):  # a slow subscription: before the marker
            await asyncio.sleep(script.pop(0))
        if marker:
            yield {"seq": None, "type": "subscribed", "after_seq": after_seq}
        for item in script:
            if isinstance(item, Exception):
                raise item
            if isinstance(item, float):
                await asyncio.sleep(item)
                continue
            self.yielded += 1
            yield item
        await asyncio.Event().wait()  # a live stream: stays open until the client leaves

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        return None

    async def complete_conversation(self, conversation_id: str) -> None:
        return None


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def connect(
    store: Store, scripts: list[list[Any]]
) -> tuple[TestClient, ScriptedSubscriptions, str, str]:
    access = ScriptedSubscriptions(scripts)
    client = TestClient(create_api(unit_context(store, access)))
    key = add_client(store, "alice")
    client_id = store.clients.client_for_key(key)
    assert client_id
    conv = create_conversation(store, client_id=client_id)
    return client, access, key, conv.id


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def receive(ws: Any, count: int) -> list[dict[str, Any]]:
    """The next ``count`` frames, leaving out ``subscribed`` markers."""
    frames: list[dict[str, Any]] = []
    while len(frames) < count:
        frame = ws.receive_json()
        if frame["type"] != "subscribed":
            frames.append(frame)
    return frames


def test_forwards_tokens_and_acks(store: Store) -> None:
    client, access, key, conv = connect(store, [[event(1), event(None, "token", delta="hi")]])
    with client.websocket_connect(f"/v1/conversations/{conv}/stream", headers=bearer(key)) as ws:
        assert ws.receive_json() == {"seq": None, "type": "subscribed", "after_seq": 0}
        assert [(e["seq"], e["type"]) for e in receive(ws, 2)] == [(1, "message"), (None, "token")]
        ws.send_json({"type": "message", "content": "hello", "id": "r1"})
        ack = ws.receive_json()
        assert ack == {
            "seq": None,
            "type": "ack",
            "conversation_id": conv,
            "turn_id": "turn_1",
            "message_id": "msg_1",
            "message_seq": 2,
            "forked": False,
            "session": None,
            "streamed_here": True,
            "id": "r1",
        }
    assert access.posted == ["hello"]
    assert access.subscribed_after == [0]


def test_a_message_before_the_subscription_is_posted_at_once(store: Store) -> None:
    """No wait for the subscription: the message is posted at once; its events reach the
    stream whenever it subscribes (they are stored, and replayed after ``after_seq``)."""
    client, access, key, conv = connect(store, [[1.0, event(1)]])
    with client.websocket_connect(f"/v1/conversations/{conv}/stream", headers=bearer(key)) as ws:
        ws.send_json({"type": "message", "content": "early"})
        frames = receive(ws, 2)
    assert [f["type"] for f in frames] == ["ack", "message"]
    assert access.yielded_before_post == [0]  # posted before the subscription was live


def test_a_stream_that_breaks_for_good_is_reported_then_closed(store: Store) -> None:
    # ``Conversations.stream_events`` needs no actor and catches up from the store itself; what
    # still breaks reaches the client as an error frame, and it reconnects with its last seq.
    client, access, key, conv = connect(store, [[event(1), event(2), Unavailable("actor died")]])
    with client.websocket_connect(
        f"/v1/conversations/{conv}/stream?after_seq=0", headers=bearer(key)
    ) as ws:
        assert [e["seq"] for e in receive(ws, 2)] == [1, 2]
        error = ws.receive_json()
        assert error["type"] == "error"
        assert error["error"]["code"] == "UNAVAILABLE" and error["error"]["retriable"] is True
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1011
    assert access.subscribed_after == [0]  # no second subscription from the gateway


def test_reconnect_resumes_after_seq(store: Store) -> None:
    client, access, key, conv = connect(store, [[event(6)]])
    with client.websocket_connect(
        f"/v1/conversations/{conv}/stream?after_seq=5", headers=bearer(key)
    ) as ws:
        assert ws.receive_json() == {"seq": None, "type": "subscribed", "after_seq": 5}
        assert receive(ws, 1)[0]["seq"] == 6
    assert access.subscribed_after == [5]


@pytest.mark.parametrize(
    ("frame", "fragment", "echoed"),
    [
        ("not json", "invalid frame", None),
        ('{"type": "dance"}', "does not match any of the expected tags", None),
        ('{"type": "message"}', "content: Field required", None),
        ('{"type": "message", "content": ""}', "content", None),
        ('{"type": "message", "content": "x", "color": "red"}', "color: Extra inputs", None),
        ('{"type": "message", "content": "x", "to": {}, "id": "r1"}', "exactly one of", "r1"),
        ('{"type": "message", "content": "x", "model": {"top_k": 1}, "id": "r2"}', "top_k", "r2"),
        ('{"type": "message", "id": 7}', "content: Field required", None),  # not a string id
        ("[1, 2]", "invalid frame", None),
    ],
)
def test_bad_frames_get_error_frames_and_the_stream_goes_on(
    store: Store, frame: str, fragment: str, echoed: str | None
) -> None:
    client, _access, key, conv = connect(store, [[]])
    with client.websocket_connect(f"/v1/conversations/{conv}/stream", headers=bearer(key)) as ws:
        ws.send_text(frame)
        error = receive(ws, 1)[0]
        assert error["type"] == "error" and error["seq"] is None
        assert error["error"]["code"] == "INVALID_INPUT"
        assert fragment in error["error"]["message"], error
        assert error.get("id") == echoed  # the frame's own id, so the client can match it
        ws.send_bytes(b'{"type": "ping", "id": "p"}')
        assert receive(ws, 1)[0] == {"seq": None, "type": "pong", "id": "p"}


def test_failed_post_is_an_error_frame(store: Store) -> None:
    client, _access, key, conv = connect(store, [[]])
    with client.websocket_connect(f"/v1/conversations/{conv}/stream", headers=bearer(key)) as ws:
        ws.send_json({"type": "message", "content": "boom", "id": "r9"})
        error = receive(ws, 1)[0]
    assert error["id"] == "r9"
    assert error["error"] == {
        "code": "UNAVAILABLE",
        "message": "actor restarting",
        "retriable": True,
    }


@pytest.mark.parametrize(
    ("query", "header", "code", "error_code"),
    [
        ("", None, 4401, "UNAUTHORIZED"),
        ("", "wrong", 4401, "UNAUTHORIZED"),
        ("?api_key={key}", None, 4401, "UNAUTHORIZED"),  # a key in a URL: refused, even a good one
        ("?ticket=wst_unknown", None, 4401, "UNAUTHORIZED"),
        ("?after_seq=-1", "{key}", 4400, "INVALID_INPUT"),
        ("?after_seq=abc", "{key}", 4400, "INVALID_INPUT"),
    ],
)
def test_refusals_close_with_a_reason(
    store: Store, query: str, header: str | None, code: int, error_code: str
) -> None:
    client, _access, key, conv = connect(store, [[]])
    headers = bearer(header.format(key=key)) if header else {}
    url = f"/v1/conversations/{conv}/stream{query.format(key=key)}"
    with client.websocket_connect(url, headers=headers) as ws:
        assert ws.receive_json()["error"]["code"] == error_code
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == code


def test_other_clients_conversation_is_not_found(store: Store) -> None:
    client, _access, _key, conv = connect(store, [[]])
    stranger = add_client(store, "mallory")
    url = f"/v1/conversations/{conv}/stream"
    with client.websocket_connect(url, headers=bearer(stranger)) as ws:
        assert ws.receive_json()["error"]["code"] == "NOT_FOUND"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == 4404
