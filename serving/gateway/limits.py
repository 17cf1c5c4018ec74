"""Request limits, per route, before any handler runs (docs/security.md lists them all).

``RequestLimits`` is an ASGI middleware: it reads a request body up to its route's limit (413
``PAYLOAD_TOO_LARGE`` past it, whether or not ``Content-Length`` said so), refuses a JSON body
nested deeper than ``MAX_JSON_DEPTH`` (400), and hands the buffered body to the app. Field lengths
(strings, lists) are the models' own ``max_length`` (422 naming the field); WebSocket frames are
bounded in ``stream`` (``MAX_FRAME_BYTES``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

KIB = 1024
MIB = 1024 * KIB
MAX_JSON_DEPTH = 64
MAX_FRAME_BYTES = 512 * KIB
DEFAULT_MAX_BODY = 64 * KIB


@dataclass(frozen=True, slots=True)
class BodyLimit:
    method: str
    pattern: re.Pattern[str]
    max_bytes: int
    what: str


# Each limit admits every body the route's schema allows: a text field of N characters may take
# 6 N bytes of JSON (``\\uXXXX`` escapes), so the routes that take a message or a persona
# (100,000 characters) take 1 MiB; a schema-valid body is never refused as too large.
BODY_LIMITS: tuple[BodyLimit, ...] = (
    BodyLimit(
        "PUT",
        re.compile(r"/v1/(personas|model-profiles|tools|tasks|workflows)/[^/]+$"),
        1 * MIB,
        "a library object",
    ),
    BodyLimit("POST", re.compile(r"/v1/(conversations/[^/]+/)?messages$"), 1 * MIB, "a message"),
    BodyLimit("POST", re.compile(r"/v1/agents$"), 1 * MIB, "an agent with its persona"),
    BodyLimit("POST", re.compile(r"/v1/triggers$"), 1 * MIB, "a trigger with its message"),
    BodyLimit("POST", re.compile(r"/v1/agents/[^/]+/memories$"), 2 * MIB, "a memory"),
    BodyLimit(
        "POST", re.compile(r"/v1/(agents/[^/]+/)?chat/completions$"), 1 * MIB, "a chat's messages"
    ),
    BodyLimit("POST", re.compile(r"/v1/conversation-imports$"), 32 * MIB, "a conversation bundle"),
)


def max_body(method: str, path: str) -> tuple[int, str]:
    """The largest body ``method path`` accepts, and what the route takes (for the message)."""
    for rule in BODY_LIMITS:
        if rule.method == method and rule.pattern.search(path):
            return rule.max_bytes, rule.what
    return DEFAULT_MAX_BODY, "this request"


def nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects deeper than ``limit`` (brackets
    inside strings do not count)."""
    if raw.count(b"{") + raw.count(b"[") <= limit:  # too few brackets: skip the scan
        return False
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
    return False


def refusal(status: int, code: str, message: str) -> tuple[int, bytes]:
    body = {"error": {"code": code, "message": message, "retriable": False}}
    return status, json.dumps(body).encode()


class RequestLimits:
    """ASGI middleware enforcing ``BODY_LIMITS`` and ``MAX_JSON_DEPTH`` on HTTP requests."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit, what = max_body(scope["method"], scope["path"])
        too_large = refusal(
            413, "PAYLOAD_TOO_LARGE", f"the body of {what} is limited to {limit} bytes"
        )
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _respond(send, *too_large)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _respond(send, *too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if b"json" in headers.get(b"content-type", b"") and nests_deeper_than(body, MAX_JSON_DEPTH):
            message_text = f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels"
            await _respond(send, *refusal(400, "INVALID_INPUT", message_text))
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
