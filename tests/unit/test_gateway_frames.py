"""How the gateway encodes a WebSocket frame (``serving.gateway.stream.encode_frame``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fastapi.encoders import jsonable_encoder

from core.domain import TaskAction
from serving.gateway.stream import encode_frame


def test_a_plain_event_is_its_json() -> None:
    event = {"seq": 7, "type": "token", "turn_id": "t", "delta": 'héllo "x"', "n": [1, None]}
    text = encode_frame(event)
    assert json.loads(text) == event
    assert "héllo" in text  # not escaped: what starlette's send_json sent


def test_what_is_not_json_is_encoded_as_fastapi_would() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    model = TaskAction(kind="python", params={"callable": "m:f"})
    frame = {"seq": None, "type": "x", "at": at, "action": model}
    assert json.loads(encode_frame(frame)) == jsonable_encoder(frame)
