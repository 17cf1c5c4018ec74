"""``http.request``: an HTTP call to a destination on the operator's allow-list.

Params: ``url``, ``method`` (default GET), ``json`` (a body), ``headers`` (name → a string, or a
secret reference ``{"secret": "name", "prefix": "Bearer "}``; only from the task definition, never
from the input), ``timeout_s`` (default 10), ``max_bytes`` (at most
``WONDER_HTTP_MAX_RESPONSE_BYTES``).

Every hop is checked (``core.egress``): the URL's host against ``WONDER_HTTP_ALLOWED_HOSTS``, then
the address its name resolves to, and the request goes to that address. Redirects are followed
by hand, up to ``WONDER_HTTP_MAX_REDIRECTS``, each one checked the same way; a redirect to another
origin drops the secret headers. The response body is streamed and read up to the cap, then the
connection is closed: the result says ``truncated`` and how many bytes were kept.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx
from pydantic import ValidationError

from actors.actions import ActionContext, JsonObject, action
from core.client_secrets import SecretRef
from core.egress import EgressPolicy, checked, http_egress
from core.errors import InvalidInput, RetryableError, Timeout
from core.secret_vault import SecretVault
from core.settings import Settings

REDIRECTS = {301, 302, 303, 307, 308}
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade"}
MAX_HEADERS = 32


@dataclass(frozen=True)
class Headers:
    """A request's headers: the plain ones and those resolved from secrets (dropped on a
    redirect to another origin)."""

    plain: dict[str, str]
    secret: dict[str, str]


def header_specs(params: JsonObject) -> dict[str, str | SecretRef]:
    """The task's ``headers``, each a string or a secret reference (checked, not resolved)."""
    raw = params.get("headers") or {}
    if not isinstance(raw, dict) or len(raw) > MAX_HEADERS:
        raise InvalidInput(f"headers must be an object of at most {MAX_HEADERS} headers")
    specs: dict[str, str | SecretRef] = {}
    for name, value in raw.items():
        if not HEADER_NAME.match(name) or name.lower() in RESERVED_HEADERS:
            raise InvalidInput(f"headers: {name!r} is not a header a task may set")
        if isinstance(value, str):
            if "\r" in value or "\n" in value or len(value) > 8192:
                raise InvalidInput(f"headers.{name}: not a valid header value")
            specs[name] = value
            continue
        try:
            specs[name] = SecretRef.model_validate(value)
        except ValidationError:
            raise InvalidInput(
                f'headers.{name}: a string or a secret reference {{"secret": "name"}}'
            ) from None
    return specs


async def resolve_headers(specs: dict[str, str | SecretRef], ctx: ActionContext) -> Headers:
    """The headers with their secrets resolved (in a worker thread: the store is read)."""
    plain = {k: v for k, v in specs.items() if isinstance(v, str)}
    refs = {k: v for k, v in specs.items() if isinstance(v, SecretRef)}
    secret: dict[str, str] = {}
    if refs:
        vault = SecretVault(ctx.services.store, ctx.services.settings)
        for name, ref in refs.items():
            where = f"http.request header {name}"
            value = await asyncio.to_thread(vault.resolve, ctx.client_id, ref.secret, where)
            secret[name] = ref.prefix + value
    return Headers(plain, secret)


def _bounded_bytes(params: JsonObject, cap: int) -> int:
    asked = params.get("max_bytes", cap)
    if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
        raise InvalidInput("max_bytes must be a positive integer")
    return min(asked, cap)


async def read_capped(response: httpx.Response, cap: int) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the body, streamed; True when more was there (not read)."""
    kept = bytearray()
    async for chunk in response.aiter_bytes():
        room = cap - len(kept)
        if len(chunk) > room:
            kept += chunk[:room]
            return bytes(kept), True
        kept += chunk
    return bytes(kept), False


@action("http.request")
async def http_request(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    url = str(params.get("url") or data.get("url") or "")
    method = str(params.get("method") or data.get("method") or "GET").upper()
    body = params.get("json", data.get("json"))
    settings = ctx.services.settings
    cap = _bounded_bytes(params, settings.http_max_response_bytes)
    specs = header_specs(params)
    policy = http_egress(settings)
    await checked(url, policy, "http.request url")  # refused before any secret is read
    headers = await resolve_headers(specs, ctx)
    timeout = float(params.get("timeout_s", 10))
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            return await _follow(client, policy, method, url, body, headers, cap, settings)
    except httpx.TimeoutException:
        raise Timeout(f"{method} {url} timed out") from None
    except httpx.TransportError as exc:
        raise RetryableError(f"{method} {url} failed ({type(exc).__name__})") from None


async def _follow(
    client: httpx.AsyncClient,
    policy: EgressPolicy,
    method: str,
    url: str,
    body: Any,
    headers: Headers,
    cap: int,
    settings: Settings,
) -> JsonObject:
    origin = None
    for _hop in range(settings.http_max_redirects + 1):
        pinned = await checked(url, policy, "http.request url")
        origin = origin or pinned.target.origin
        sent = {**headers.plain, **pinned.headers()}
        if pinned.target.origin == origin:
            sent.update(headers.secret)
        request = client.build_request(
            method, pinned.url(), json=body, headers=sent, extensions=pinned.extensions()
        )
        response = await client.send(request, stream=True)
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECTS and location:
                url = urljoin(url, location)
                if response.status_code == 303 or (
                    response.status_code in (301, 302) and method == "POST"
                ):
                    method, body = "GET", None
                continue
            return await _result(response, method, url, cap)
        finally:
            await response.aclose()
    raise InvalidInput(f"{method} {url}: more than {settings.http_max_redirects} redirects")


async def _result(response: httpx.Response, method: str, url: str, cap: int) -> JsonObject:
    if response.status_code >= 500:
        raise RetryableError(f"{method} {url} returned {response.status_code}")
    content, truncated = await read_capped(response, cap)
    text = content.decode(errors="replace")
    parsed: Any = text
    if not truncated:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
    result: JsonObject = {"status": response.status_code, "body": parsed, "bytes": len(content)}
    if truncated:
        result["truncated"] = True
        result["note"] = f"the body was longer than {cap} bytes: only the first {cap} were read"
    return result
