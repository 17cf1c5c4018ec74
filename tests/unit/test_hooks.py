"""``core.hooks``: which deliveries are taken in, and how long a delivery is remembered."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.errors import Unauthorized
from core.hook_model import Hook
from core.hooks import replay_expiry, signature, verify_delivery
from core.routes import Route

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
HOOK = Hook(
    id="hook_1",
    client_id="c1",
    secret="ab" * 32,
    route=Route(kind="persona", target="atlas"),
    created_at=NOW,
)
BODY = b'{"content": "build 42 failed"}'
STAMP = str(int(NOW.timestamp()))
SIGNED = signature(HOOK.secret, STAMP, BODY)


@pytest.mark.parametrize(
    ("timestamp", "signed", "body", "fragment"),
    [
        (None, SIGNED, BODY, "send X-Wonder-Timestamp"),
        (STAMP, None, BODY, "send X-Wonder-Timestamp"),
        ("yesterday", SIGNED, BODY, "not Unix seconds"),
        ("nan", signature(HOOK.secret, "nan", BODY), BODY, "not Unix seconds"),
        ("inf", signature(HOOK.secret, "inf", BODY), BODY, "not Unix seconds"),
        (str(int(NOW.timestamp()) - 301), SIGNED, BODY, "replay window"),
        (str(int(NOW.timestamp()) + 301), SIGNED, BODY, "replay window"),
        (STAMP, signature("cd" * 32, STAMP, BODY), BODY, "does not match"),
        (STAMP, SIGNED, BODY + b" ", "does not match"),
        (STAMP, "sha256=00", BODY, "does not match"),
    ],
)
def test_refused_deliveries(
    timestamp: str | None, signed: str | None, body: bytes, fragment: str
) -> None:
    with pytest.raises(Unauthorized, match=fragment):
        verify_delivery(HOOK, timestamp, signed, body, NOW, 300)


@pytest.mark.parametrize(
    "sent", [SIGNED, SIGNED.upper().replace("SHA256=", "sha256="), f" {SIGNED}"]
)
def test_a_taken_delivery_is_known_by_its_canonical_signature(sent: str) -> None:
    """Hex case and spaces do not make a repeat look new."""
    assert verify_delivery(HOOK, STAMP, sent, BODY, NOW, 300) == SIGNED


@pytest.mark.parametrize("offset_s", [-300, 0, 300])
def test_a_delivery_is_remembered_until_its_timestamp_leaves_the_window(offset_s: int) -> None:
    stamp = str(int(NOW.timestamp()) + offset_s)
    expires = replay_expiry(stamp, 300)
    assert expires == NOW + timedelta(seconds=offset_s + 300)
    signed = signature(HOOK.secret, stamp, BODY)
    verify_delivery(HOOK, stamp, signed, BODY, expires, 300)  # a repeat up to then is taken in
    with pytest.raises(Unauthorized, match="replay window"):
        verify_delivery(HOOK, stamp, signed, BODY, expires + timedelta(seconds=1), 300)
