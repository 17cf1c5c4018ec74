"""Pure parts of the gateway: cursors, seq bookkeeping, error → status mapping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.domain import Conversation
from core.errors import (
    Conflict,
    InvalidInput,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    RetryableError,
    Timeout,
    Unauthorized,
    WonderError,
)
from serving.gateway.errors import as_wonder_error, status_for, validation_error
from serving.gateway.stream import parse_after_seq
from serving.gateway.translation import decode_cursor, encode_cursor

KEY = b"k" * 32


def test_cursor_round_trip() -> None:
    at = datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)
    conv = Conversation(id="conv_1", client_id="c", created_at=at)
    assert decode_cursor(encode_cursor(conv, KEY), KEY) == (at.isoformat(), "conv_1")


def _forged(body: list[str], key: bytes) -> str:
    """A well-formed cursor for ``body`` (what an outsider could build), signed with ``key``."""
    at = datetime.fromisoformat(body[0])
    return encode_cursor(Conversation(id=body[1], client_id="c", created_at=at), key)


@pytest.mark.parametrize(
    "cursor",
    [
        "zzz",
        "",
        "W10",
        "x" * 600,
        "WyJub3QgYSBkYXRlIiwgImEiXQ",
        "WyIyMDI2LTExLTIyVDEyOjAwOjAwKzAwOjAwIiwgImNvbnZfMSJd",  # unsigned, well-formed body
        _forged(["2026-11-22T12:00:00+00:00", "conv_1"], b"another key"),
        # this API's signature of conv_1's cursor, on a body naming conv_2
        _forged(["2026-11-22T12:00:00+00:00", "conv_2"], KEY).split(".")[0]
        + "."
        + _forged(["2026-11-22T12:00:00+00:00", "conv_1"], KEY).split(".")[1],
    ],
)
def test_bad_and_forged_cursors_name_no_page(cursor: str) -> None:
    with pytest.raises(NotFound, match="after_cursor"):
        decode_cursor(cursor, KEY)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotFound("x"), 404),
        (InvalidInput("x"), 400),
        (PermissionDenied("x"), 403),
        (Conflict("x"), 409),
        (Unauthorized("x"), 401),
        (RetryableError("x"), 503),
        (Timeout("x"), 503),
        (NonRetryableError("x"), 400),
        (WonderError("x"), 500),
    ],
)
def test_status_for(error: WonderError, status: int) -> None:
    assert status_for(error) == status


def test_wonder_errors_pass_and_unexpected_ones_do_not() -> None:
    error = NotFound("conversation c not found")
    assert as_wonder_error(error) is error
    assert as_wonder_error(ValueError("x")) is None


def test_validation_error_names_fields() -> None:
    status, body = validation_error(
        [{"type": "missing", "loc": ("body", "content"), "msg": "Field required"}]
    )
    assert status == 422
    assert body["error"]["message"] == "body.content: Field required"
    assert body["error"]["details"] == [{"path": "body.content", "message": "Field required"}]


@pytest.mark.parametrize(("raw", "value"), [(None, 0), ("", 0), ("0", 0), ("17", 17)])
def test_parse_after_seq(raw: str | None, value: int) -> None:
    assert parse_after_seq(raw) == value


@pytest.mark.parametrize("raw", ["-1", "1.5", "abc", "9" * 30])
def test_parse_after_seq_rejects(raw: str) -> None:
    with pytest.raises(InvalidInput, match="after_seq"):
        parse_after_seq(raw)
