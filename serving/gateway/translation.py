"""Between stored shapes and wire shapes: page cursors, event frames, client frames, errors.

Pure functions; no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from core.domain import Conversation
from core.errors import InvalidInput, NotFound
from serving.gateway.errors import field_problems
from serving.gateway.protocol import CLIENT_FRAME, AnyClientFrame

MAX_CURSOR_CHARS = 512
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,488}\.[A-Za-z0-9_-]{22}$"  # base64url body . signature


SIGNATURE_BYTES = 16


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, body: str) -> bytes:
    return hmac.new(key, body.encode(), hashlib.sha256).digest()[:SIGNATURE_BYTES]


def encode_cursor(conversation: Conversation, key: bytes) -> str:
    """An opaque cursor resuming a listing after ``conversation`` (ordered by created_at, id),
    signed with ``key`` so that only cursors this API issued are accepted back."""
    return encode_position(conversation.created_at, conversation.id, key)


def encode_position(created_at: datetime, item_id: str, key: bytes) -> str:
    """``encode_cursor`` for any listing ordered by (created_at, id) (turns, too)."""
    body = _b64(json.dumps([created_at.isoformat(), item_id]).encode())
    return f"{body}.{_b64(_signature(key, body))}"


def decode_cursor(cursor: str, key: bytes) -> tuple[str, str]:
    """``(created_at, id)`` from a cursor made by ``encode_cursor`` with ``key``; ``NotFound``
    otherwise: no page of the listing starts there (a forged, altered or malformed cursor; the
    query parameter's pattern, ``CURSOR_PATTERN``, already refuses what is not shaped like one)."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        body, _, signature = cursor.partition(".")
        if not hmac.compare_digest(_unb64(signature), _signature(key, body)):
            raise ValueError("not signed by this API")
        raw = _unb64(body)
        created_at, last_id = json.loads(raw)
        datetime.fromisoformat(created_at)
        if not isinstance(last_id, str):
            raise ValueError("id is not a string")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise NotFound(f"after_cursor is not a cursor this API returned ({exc})") from None
    return created_at, last_id


def parse_client_frame(text: str | bytes) -> AnyClientFrame:
    """A client's WebSocket frame, validated; ``InvalidInput`` names what is wrong with it."""
    try:
        return CLIENT_FRAME.validate_json(text)
    except ValidationError as exc:
        problems = field_problems(exc.errors())
        summary = "; ".join(f"{p['path'] or 'frame'}: {p['message']}" for p in problems)
        raise InvalidInput(f"invalid frame: {summary}") from None


def frame_id(text: str | bytes) -> str | None:
    """The ``id`` a frame the server could not use asked to be echoed (a string of at most 100
    characters in a JSON object), so that the client can match the error to its request."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    found = parsed.get("id") if isinstance(parsed, dict) else None
    return found if isinstance(found, str) and len(found) <= 100 else None


def error_frame(error: dict[str, Any], request_id: str | None = None) -> dict[str, Any]:
    """A server → client frame reporting a failure (not an event: ``seq`` is None)."""
    frame: dict[str, Any] = {"seq": None, "type": "error", "error": error}
    if request_id is not None:
        frame["id"] = request_id
    return frame
