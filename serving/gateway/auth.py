"""API-key authentication: ``Authorization: Bearer <key>`` → the client id that owns the key.

Browsers cannot set headers on a WebSocket, so the stream also accepts ``?api_key=``. A revoked or
expired key is refused with a 401 saying so; ``KeyAdmin`` routes (keys, library writes) need a key
with the admin scope (403 for an app key). See ``core.keys``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, WebSocket
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.errors import PermissionDenied, Unauthorized
from core.ids import utc_now
from core.keys import ApiKey, KeyScope
from serving.gateway.context import GatewayContext, get_context
from serving.gateway.quota_checks import QuotaGuard, get_guard

bearer = HTTPBearer(auto_error=False, description="A Wonder API key (`wonder keys create NAME`)")

MAX_KEY_CHARS = 512
USER_HEADER = "X-Wonder-User"  # the acting user of the client's app (``serving.gateway.members``)


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


def websocket_key(websocket: WebSocket) -> str | None:
    """A WebSocket's API key: the ``Authorization`` header, else the ``api_key`` query param."""
    header = websocket.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return websocket.query_params.get("api_key") or None


def key_is_admin(
    context: Annotated[GatewayContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> bool:
    """FastAPI dependency: whether the request's key is an operator (admin) key."""
    return credentials is not None and context.store.admin_keys.is_admin(credentials.credentials)


ClientId = Annotated[str, Depends(require_client)]
RequestKey = Annotated[ApiKey, Depends(require_key)]
KeyAdmin = Annotated[ApiKey, Depends(require_key_admin)]
IsAdmin = Annotated[bool, Depends(key_is_admin)]
AdminId = Annotated[str, Depends(require_admin)]
Guard = Annotated[QuotaGuard, Depends(get_guard)]
Context = Annotated[GatewayContext, Depends(get_context)]
