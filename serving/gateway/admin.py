"""Quotas and the audit trail over the API.

``PUT``/``GET /v1/clients/{client_id}/quota`` need an operator (admin) key; ``GET /v1/quota``
shows a client its own. ``GET /v1/audit`` lists recorded changes oldest first: an admin key
sees every entry (``?client_id=`` narrows it), any other key the entries its client made or is
the subject of, and an acting user (``X-Wonder-User``) only the entries it made. Filters:
``action`` (one, or a family ending in a dot), ``target``, ``key_id``, ``user_id``, ``since``,
``until``. Entries are written through ``serving.gateway.audit_trail``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from core.errors import InvalidInput, PermissionDenied
from core.ids import utc_now
from core.quotas import Quota
from core.store.audit import AuditEntry, AuditFilter
from serving.gateway.audit_trail import Audit, record
from serving.gateway.auth import USER_PATTERN, AdminId, ClientId, Context, Guard, IsAdmin, User
from serving.gateway.protocol import Page
from serving.gateway.query_params import Rfc3339Time

__all__ = ["record", "router"]  # ``record``: the audit trail's older entry point, kept here

router = APIRouter(tags=["quotas and audit"])

ClientPath = Annotated[str, Path(min_length=1, max_length=64, description="A client id")]


@router.get(
    "/v1/quota", response_model=Quota, response_model_exclude_none=True, summary="Your quota"
)
def own_quota(context: Context, client_id: ClientId) -> Quota:
    return context.store.quotas.get(client_id) or Quota()


@router.get(
    "/v1/clients/{client_id}/quota",
    response_model=Quota,
    response_model_exclude_none=True,
    summary="A client's quota (admin key)",
)
def get_quota(client_id: ClientPath, context: Context, _admin: AdminId) -> Quota:
    context.store.clients.get(client_id)  # 404 for an unknown client
    return context.store.quotas.get(client_id) or Quota()


@router.put(
    "/v1/clients/{client_id}/quota",
    response_model=Quota,
    response_model_exclude_none=True,
    summary="Set a client's quota (admin key); omitted fields are unlimited",
)
async def put_quota(
    client_id: ClientPath,
    body: Quota,
    context: Context,
    _admin: AdminId,
    guard: Guard,
    audit: Audit,
) -> Quota:
    await run_in_threadpool(context.store.clients.get, client_id)
    before = await run_in_threadpool(context.store.quotas.get, client_id)
    stored = await run_in_threadpool(context.store.quotas.put, client_id, body, utc_now())
    guard.forget(client_id)
    details: dict[str, object] = {
        "before": before.model_dump(exclude_none=True) if before else {},
        "after": stored.model_dump(exclude_none=True),
    }
    await run_in_threadpool(audit.record, "quota.set", f"client:{client_id}", details, client_id)
    return stored


ACTION_PATTERN = r"^[a-z][a-z_]*(\.[a-z_]+)*\.?$"


@router.get("/v1/audit", response_model=Page[AuditEntry], summary="Recorded changes, oldest first")
def list_audit(
    context: Context,
    client_id: ClientId,
    is_admin: IsAdmin,
    user: User,
    of_client: Annotated[
        str | None,
        Query(alias="client_id", max_length=64, description="Admin keys: one client's entries"),
    ] = None,
    action: Annotated[
        str | None,
        Query(
            max_length=64,
            pattern=ACTION_PATTERN,
            description="One action (key.revoke), or a family ending in a dot (key.)",
        ),
    ] = None,
    target: Annotated[
        str | None, Query(max_length=300, description="One object: hook:<id>, key:<id>, ...")
    ] = None,
    key_id: Annotated[
        str | None, Query(max_length=64, description="Changes made with this API key")
    ] = None,
    user_id: Annotated[
        str | None,
        Query(max_length=200, pattern=USER_PATTERN, description="Changes made as this user"),
    ] = None,
    since: Annotated[
        Rfc3339Time | None, Query(description="At or after this time (with a time zone)")
    ] = None,
    until: Annotated[
        Rfc3339Time | None, Query(description="Before this time (with a time zone)")
    ] = None,
    after_cursor: Annotated[str | None, Query(max_length=64, description="An entry id")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Page[AuditEntry]:
    if not is_admin:
        if of_client not in (None, client_id):
            raise PermissionDenied("only an admin key reads another client's audit entries")
        of_client = client_id
    if user is not None:  # an acting user reads only the changes it made
        if user_id not in (None, user):
            raise PermissionDenied(f"user {user} reads only its own audit entries")
        user_id = user
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.tzinfo is None:
            raise InvalidInput(f"{name}: give a time zone (e.g. 2026-01-31T09:00:00Z)")
    where = AuditFilter(
        action=action, target=target, key_id=key_id, user_id=user_id, since=since, until=until
    )
    found = context.store.audit.list(of_client, after=after_cursor, limit=limit + 1, where=where)
    items = found[:limit]
    return Page[AuditEntry](items=items, next_cursor=items[-1].id if len(found) > limit else None)
