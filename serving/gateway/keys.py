"""A client's API keys over the API (issue 13): list, create, revoke, rotate. Admin scope only.

``GET /v1/keys`` lists the client's keys (never their secrets); ``POST /v1/keys`` makes one
(``scope`` app or admin, an optional ``expires_at``) and shows its secret once;
``POST /v1/keys/{key_id}/revoke`` stops a key at once (its open streams close);
``POST /v1/keys/{key_id}/rotate`` makes a new secret with the same name and scope and revokes the
old one, or lets it run for ``grace_s`` more seconds. Another client's key is a 404; an app key
gets a 403; the client's last working admin key cannot be revoked (409).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import AwareDatetime, Field
from starlette.concurrency import run_in_threadpool

from core.errors import Conflict
from core.ids import utc_now
from core.keys import ApiKey, KeyScope, KeyStatus
from core.store.keys import KEY_ID_PATTERN
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import Context, KeyAdmin
from serving.gateway.context import GatewayContext
from serving.gateway.key_watch import get_key_watch
from serving.gateway.protocol import Items, WireModel

router = APIRouter(prefix="/v1/keys", tags=["keys"])

KeyIdPath = Annotated[
    str, Path(pattern=KEY_ID_PATTERN, description="A key id (`key_…`, from GET /v1/keys)")
]
MAX_GRACE_S = 7 * 24 * 3600


class KeyOut(WireModel):
    """A key as listed: never its secret."""

    id: str = Field(description="The key's public id (`key_…`)")
    client_id: str
    name: str | None = None
    scope: KeyScope = Field(description="admin: manages keys and the library; app: the rest")
    status: KeyStatus = Field(description="active | expired | revoked, now")
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


class KeyCreate(WireModel):
    name: str = Field(min_length=1, max_length=100, description="What the key is for")
    scope: KeyScope = Field(KeyScope.APP, description="app (default) or admin")
    expires_at: AwareDatetime | None = Field(None, description="When it stops working (UTC)")


class KeyRotate(WireModel):
    grace_s: int = Field(
        0,
        ge=0,
        le=MAX_GRACE_S,
        description="Seconds the old key keeps working (0: revoked at once)",
    )
    expires_at: AwareDatetime | None = Field(
        None, description="The new key's expiry (default: none)"
    )


class KeyCreated(WireModel):
    key: KeyOut
    api_key: str = Field(description="The secret: shown once, send as 'Authorization: Bearer …'")


def key_out(key: ApiKey, now: datetime | None = None) -> KeyOut:
    return KeyOut(**key.model_dump(), status=key.status(now or utc_now()))


def new_secret() -> str:
    return f"wk_{secrets.token_urlsafe(32)}"


def _future(expires_at: datetime | None, now: datetime) -> datetime | None:
    if expires_at is not None and expires_at <= now:
        # The rule is against the clock, not the body's shape: a conflict with the present.
        raise Conflict("expires_at: must be in the future")
    return expires_at


def _check_not_last_admin(context: GatewayContext, key: ApiKey) -> None:
    """409 when revoking ``key`` would leave its client without a working admin key."""
    now = utc_now()
    if key.scope != KeyScope.ADMIN or key.status(now) != KeyStatus.ACTIVE:
        return
    others = [
        k
        for k in context.store.keys.list(key.client_id)
        if k.id != key.id and k.scope == KeyScope.ADMIN and k.status(now) == KeyStatus.ACTIVE
    ]
    if not others:
        raise Conflict(
            f"{key.id} is the client's last working admin key: create another admin key "
            "(POST /v1/keys with scope admin) or rotate this one instead"
        )


@router.get("", response_model=Items[KeyOut], summary="List the client's keys (admin scope)")
def list_keys(context: Context, admin: KeyAdmin) -> Items[KeyOut]:
    now = utc_now()
    return Items[KeyOut](items=[key_out(k, now) for k in context.store.keys.list(admin.client_id)])


@router.post("", status_code=201, response_model=KeyCreated, summary="Create a key (admin scope)")
def create_key(body: KeyCreate, context: Context, admin: KeyAdmin, audit: Audit) -> KeyCreated:
    now = utc_now()
    secret = new_secret()
    stored = context.store.keys.add(
        admin.client_id,
        secret,
        now,
        name=body.name,
        scope=body.scope,
        expires_at=_future(body.expires_at, now),
    )
    details = {"key_id": stored.id, "name": body.name, "scope": body.scope.value}
    audit.record("key.create", f"key:{stored.id}", details, admin.client_id)
    return KeyCreated(key=key_out(stored, now), api_key=secret)


@router.get("/{key_id}", response_model=KeyOut, summary="Get one of the client's keys")
def get_key(key_id: KeyIdPath, context: Context, admin: KeyAdmin) -> KeyOut:
    return key_out(context.store.keys.get(key_id, admin.client_id))


@router.post(
    "/{key_id}/revoke",
    response_model=KeyOut,
    summary="Revoke a key: refused at once, on REST and on its open WebSockets",
)
async def revoke_key(
    key_id: KeyIdPath, context: Context, admin: KeyAdmin, request: Request, audit: Audit
) -> KeyOut:
    key = await run_in_threadpool(context.store.keys.get, key_id, admin.client_id)
    if key.revoked_at is not None:
        return key_out(key)
    await run_in_threadpool(_check_not_last_admin, context, key)
    revoked = await run_in_threadpool(context.store.keys.revoke, key_id, utc_now())
    await get_key_watch(request).refuse(key_id, f"API key {key_id} was revoked")
    details = {"key_id": key_id, "name": key.name}
    await run_in_threadpool(audit.record, "key.revoke", f"key:{key_id}", details, admin.client_id)
    return key_out(revoked)


@router.post(
    "/{key_id}/rotate",
    status_code=201,
    response_model=KeyCreated,
    summary="A new secret for a key (same name and scope); the old one is revoked or expires",
)
async def rotate_key(
    key_id: KeyIdPath,
    context: Context,
    admin: KeyAdmin,
    request: Request,
    audit: Audit,
    body: KeyRotate | None = None,
) -> KeyCreated:
    rotation = body or KeyRotate()
    now = utc_now()
    old = await run_in_threadpool(context.store.keys.get, key_id, admin.client_id)
    if old.status(now) != KeyStatus.ACTIVE:
        raise Conflict(f"{key_id} is {old.status(now).value}: only an active key is rotated")
    secret = new_secret()
    expires_at = _future(rotation.expires_at, now)

    def swap() -> ApiKey:
        with context.store.db.begin() as conn:
            new = context.store.keys.add(
                old.client_id,
                secret,
                now,
                name=old.name,
                scope=old.scope,
                expires_at=expires_at,
                conn=conn,
            )
            if rotation.grace_s == 0:
                context.store.keys.revoke(key_id, now, conn)
        if rotation.grace_s:
            context.store.keys.expire(key_id, now + timedelta(seconds=rotation.grace_s))
        return new

    new = await run_in_threadpool(swap)
    if rotation.grace_s == 0:
        await get_key_watch(request).refuse(key_id, f"API key {key_id} was rotated")
    details = {"key_id": key_id, "new_key_id": new.id, "grace_s": rotation.grace_s}
    await run_in_threadpool(audit.record, "key.rotate", f"key:{key_id}", details, admin.client_id)
    return KeyCreated(key=key_out(new, now), api_key=secret)
