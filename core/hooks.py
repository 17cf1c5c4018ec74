"""Webhooks: ``POST /v1/hooks/{id}`` deliveries, signed with the hook's secret (HMAC-SHA256).

A delivery carries ``X-Wonder-Timestamp`` (Unix seconds) and ``X-Wonder-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``"<timestamp>." + body`` under the hook's secret. A bad or
missing signature, or a timestamp outside the replay window (``WONDER_HOOK_REPLAY_WINDOW_S``,
default 300 s, either way), is ``Unauthorized``. The message it carries is routed by the hook's
rule (default: a persona's main session, ``core.sessions``), with ``source: webhook``.

Deliveries are idempotent inside the window: the store remembers each delivery by its signature
(so by timestamp and body) until its timestamp leaves the window (``replay_expiry``); a repeat is
answered with what the first one led to and starts no second turn. After that the repeat is
outside the window, so refused. Like a cron trigger's due time, a delivery is claimed before its
message is posted: a gateway crash between the two loses that delivery rather than taking it
twice (a post that fails with an error releases the claim, so the sender's retry is taken).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from datetime import UTC, datetime, timedelta

from core.errors import InvalidInput, Unauthorized
from core.hook_model import Hook

SIGNATURE_PREFIX = "sha256="
DEFAULT_WINDOW_S = 300


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: what a sender puts in ``X-Wonder-Signature``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def verify_delivery(
    hook: Hook,
    timestamp: str | None,
    signed: str | None,
    body: bytes,
    now: datetime,
    window_s: float = DEFAULT_WINDOW_S,
) -> str:
    """``Unauthorized`` unless ``body`` is signed by the hook's secret within the window;
    returns the signature (canonical: what identifies the delivery)."""
    if not timestamp or not signed:
        raise Unauthorized("send X-Wonder-Timestamp and X-Wonder-Signature")
    try:
        sent = float(timestamp)
    except ValueError:
        sent = math.nan
    if not math.isfinite(sent):
        raise Unauthorized("X-Wonder-Timestamp is not Unix seconds")
    if abs(now.timestamp() - sent) > window_s:
        raise Unauthorized(f"X-Wonder-Timestamp is outside the {window_s:g} s replay window")
    expected = signature(hook.secret, timestamp, body)
    if not hmac.compare_digest(signed.strip().lower(), expected):
        raise Unauthorized("X-Wonder-Signature does not match this hook's secret")
    return expected


def replay_expiry(timestamp: str, window_s: float = DEFAULT_WINDOW_S) -> datetime:
    """When a delivery stamped ``timestamp`` (verified) leaves the window: until then a repeat
    of it must be recognised."""
    return datetime.fromtimestamp(float(timestamp), UTC) + timedelta(seconds=window_s)


def delivery_content(body: bytes) -> str:
    """The message a delivery carries: a JSON object's ``content`` string, else the body as text."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidInput("the delivery body is not UTF-8 text") from None
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("content"), str):
        text = parsed["content"]
    if not text.strip():
        raise InvalidInput("the delivery body is empty")
    return text
