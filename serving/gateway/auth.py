"""API-key authentication: ``Authorization: Bearer <key>`` → the client id that owns the key.

A key never travels in a URL: the WebSocket takes the same header, or a one-use stream ticket
(``serving.gateway.stream_tickets``) for browsers, which cannot set headers on a WebSocket. A
revoked or expired key is refused with a 401 saying so; ``KeyAdmin`` routes (keys, library
writes) need a key with the admin scope (403 for an app key). See ``core.keys``.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header, Request, WebSocket
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.errors import InvalidInput, NotFound, PermissionDenied, Unauthorized
from core.ids import utc_now
from core.keys import ApiKey, KeyScope
from serving.gateway.context import GatewayContext, get_context
from serving.gateway.quota_checks import QuotaGuard, get_guard

bearer = HTTPBearer(auto_error=False, description="A Wonder API key (`wonder keys create NAME`)")

MAX_KEY_CHARS = 512
USER_HEADER = "X-Wonder-User"  # the acting user of the client's app (``serving.gateway.members``)
USER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,199}$"


def authenticate(context: GatewayContext, key: str | None) -> ApiKey:
    """The active key whose secret is ``key``; ``Unauthorized`` when it is missing, unknown,
    revoked or expired (the message says which)."""
    if not key:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <api key>'")
    if len(key) > MAX_KEY_CHARS:
        raise Unauthorized("invalid API key")
    found = context.store.keys.find(key)
    if found is None:
        raise Unauthorized("invalid API key")
    refusal = found.refusal(utc_now())
    if refusal is not None:
        raise Unauthorized(refusal)
    return found


def authenticate_hash(context: GatewayContext, key_hash: str) -> ApiKey:
    """``authenticate`` for a key known by its hash (a stream opened with a ticket, or checked
    again as its messages arrive)."""
    try:
        found = context.store.keys.by_hash(key_hash)
    except NotFound:
        raise Unauthorized("the API key no longer exists") from None
    refusal = found.refusal(utc_now())
    if refusal is not None:
        raise Unauthorized(refusal)
    return found


def client_for_key(context: GatewayContext, key: str | None) -> str:
    """The client id that owns ``key`` (an active key); ``Unauthorized`` otherwise."""
    return authenticate(context, key).client_id


def require_key(
    request: Request,
    context: Annotated[GatewayContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    guard: Annotated[QuotaGuard, Depends(get_guard)],
) -> ApiKey:
    """FastAPI dependency: the request's active key (401 otherwise), within its client's request
    rate and its acting user's (``X-Wonder-User``; 429 otherwise). FastAPI runs it once per
    request however many routes' parameters use it."""
    key = authenticate(context, credentials.credentials if credentials else None)
    guard.admit_request(key.client_id, request.headers.get(USER_HEADER))
    return key


def require_client(key: Annotated[ApiKey, Depends(require_key)]) -> str:
    """FastAPI dependency: the authenticated client's id."""
    return key.client_id


def require_key_admin(key: Annotated[ApiKey, Depends(require_key)]) -> ApiKey:
    """FastAPI dependency: a key with the admin scope (keys, the client's library); 403 for an
    app key."""
    if key.scope != KeyScope.ADMIN:
        raise PermissionDenied(
            f"this needs a key with the admin scope; {key.id} is an app key "
            "(admin keys manage the client's keys and library)"
        )
    return key


def require_admin(
    context: Annotated[GatewayContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str:
    """FastAPI dependency: the client id of an operator (admin) key; 403 for any other key."""
    key = credentials.credentials if credentials else None
    client_id = client_for_key(context, key)
    if key is None or not context.store.admin_keys.is_admin(key):
        raise PermissionDenied("this needs an admin key (`wonder keys create NAME --admin`)")
    return client_id


KEY_IN_URL = (
    "API keys are refused in URLs (they end up in logs): send 'Authorization: Bearer <key>', "
    "or open the stream with ?ticket= from POST /v1/stream-tickets"
)


def websocket_key(websocket: WebSocket) -> str | None:
    """A WebSocket's API key: the ``Authorization`` header (None without one); a key in the
    query string (``?api_key=``) is ``Unauthorized``."""
    if "api_key" in websocket.query_params:
        raise Unauthorized(KEY_IN_URL)
    header = websocket.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def bearer_secret(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> str | None:
    """FastAPI dependency: the request's bearer secret, as sent (``require_key`` checks it)."""
    return credentials.credentials if credentials else None


def key_is_admin(
    context: Annotated[GatewayContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> bool:
    """FastAPI dependency: whether the request's key is an operator (admin) key."""
    return credentials is not None and context.store.admin_keys.is_admin(credentials.credentials)


def acting_user(
    user: Annotated[
        str | None,
        Header(
            alias=USER_HEADER,
            pattern=USER_PATTERN,
            description="The acting user of your app (docs/api.md, Access); "
            "omit to act as the client",
        ),
    ] = None,
) -> str | None:
    """The user named by ``X-Wonder-User`` (None: the client itself); malformed: 422 (the
    OpenAPI declares the pattern, FastAPI checks it; the check here guards direct callers)."""
    if user is None:
        return None
    if not re.match(USER_PATTERN, user):
        raise InvalidInput(f"{USER_HEADER}: a user id of 1-200 letters, digits and _.:@+-")
    return user


ClientId = Annotated[str, Depends(require_client)]
RequestKey = Annotated[ApiKey, Depends(require_key)]
KeyAdmin = Annotated[ApiKey, Depends(require_key_admin)]
IsAdmin = Annotated[bool, Depends(key_is_admin)]
AdminId = Annotated[str, Depends(require_admin)]
Guard = Annotated[QuotaGuard, Depends(get_guard)]
Context = Annotated[GatewayContext, Depends(get_context)]
User = Annotated[str | None, Depends(acting_user)]
BearerSecret = Annotated[str | None, Depends(bearer_secret)]
