"""API-key authentication: ``Authorization: Bearer <key>`` → the client id that owns the key.

Browsers cannot set headers on a WebSocket, so the stream also accepts ``?api_key=``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, WebSocket
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.errors import PermissionDenied, Unauthorized
from serving.gateway.context import GatewayContext, get_context
from serving.gateway.quota_checks import QuotaGuard, get_guard

bearer = HTTPBearer(auto_error=False, description="A Wonder API key (`wonder keys create NAME`)")

MAX_KEY_CHARS = 512


def client_for_key(context: GatewayContext, key: str | None) -> str:
    """The client id that owns ``key``; ``Unauthorized`` when it is missing or unknown."""
    if not key:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <api key>'")
    if len(key) > MAX_KEY_CHARS:
        raise Unauthorized("invalid API key")
    client_id = context.store.clients.client_for_key(key)
    if client_id is None:
        raise Unauthorized("invalid API key")
    return client_id


def require_client(
    context: Annotated[GatewayContext, Depends(get_context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    guard: Annotated[QuotaGuard, Depends(get_guard)],
) -> str:
    """FastAPI dependency: the authenticated client's id (401 otherwise), within its request
    rate (429 otherwise)."""
    client_id = client_for_key(context, credentials.credentials if credentials else None)
    guard.admit_request(client_id)
    return client_id


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
IsAdmin = Annotated[bool, Depends(key_is_admin)]
AdminId = Annotated[str, Depends(require_admin)]
Guard = Annotated[QuotaGuard, Depends(get_guard)]
Context = Annotated[GatewayContext, Depends(get_context)]
