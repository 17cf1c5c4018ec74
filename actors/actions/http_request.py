"""``http.request``: an HTTP call to a host on the allow-list (``WONDER_HTTP_ALLOWED_HOSTS``)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

import httpx

from actors.actions import ActionContext, JsonObject, action
from core.errors import InvalidInput, PermissionDenied, RetryableError, Timeout

MAX_BODY_BYTES = 64 * 1024


def _allowed_hosts(ctx: ActionContext) -> list[str]:
    return [h.strip().lower() for h in ctx.services.settings.http_allowed_hosts if h.strip()]


@action("http.request")
async def http_request(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    url = str(params.get("url") or data.get("url") or "")
    method = str(params.get("method") or data.get("method") or "GET").upper()
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InvalidInput(f"http.request needs an http(s) URL, got {url!r}")
    host = parsed.hostname.lower()
    port_host = f"{host}:{parsed.port}" if parsed.port else host
    allowed = _allowed_hosts(ctx)
    if host not in allowed and port_host not in allowed:
        raise PermissionDenied(f"host {port_host} is not on the allow-list")
    body = params.get("json", data.get("json"))
    try:
        async with httpx.AsyncClient(timeout=float(params.get("timeout_s", 10))) as client:
            response = await client.request(method, url, json=body)
    except httpx.TimeoutException as exc:
        raise Timeout(f"{method} {url} timed out") from exc
    except httpx.TransportError as exc:
        raise RetryableError(f"{method} {url} failed: {exc}") from exc
    if response.status_code >= 500:
        raise RetryableError(f"{method} {url} returned {response.status_code}")
    text = response.content[:MAX_BODY_BYTES].decode(errors="replace")
    try:
        parsed_body: Any = json.loads(text)
    except ValueError:
        parsed_body = text
    return {"status": response.status_code, "body": parsed_body}
