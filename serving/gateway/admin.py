"""Quotas and the audit trail over the API.

``PUT``/``GET /v1/clients/{client_id}/quota`` need an operator (admin) key; ``GET /v1/quota``
shows a client its own. ``GET /v1/audit`` lists recorded changes oldest first: an admin key
sees every entry (``?client_id=`` narrows it), any other key the entries its client made or is
the subject of.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from core.errors import PermissionDenied
from core.ids import new_id, utc_now
from core.quotas import Quota
from core.store.audit import AuditEntry
from serving.gateway.auth import AdminId, ClientId, Context, Guard, IsAdmin
from serving.gateway.protocol import Page

router = APIRouter(tags=["quotas and audit"])

ClientPath = Annotated[str, Path(min_length=1, max_length=64, description="A client id")]


def record(
    context: Context,
    actor_client_id: str,
    action: str,
    target: str,
    details: Mapping[str, object],
    subject_client_id: str | None = None,
) -> AuditEntry:
    """Append one change to the audit trail, made by ``actor_client_id``'s key."""
    entry = AuditEntry(
        id=new_id("audit"),
        at=utc_now(),
        actor=f"client:{actor_client_id}",
        client_id=actor_client_id,
        action=action,
        target=target,
        subject_client_id=subject_client_id,
        details=dict(details),
    )
    return context.store.audit.record(entry)


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
    client_id: ClientPath, body: Quota, context: Context, admin: AdminId, guard: Guard
) -> Quota:
    await run_in_threadpool(context.store.clients.get, client_id)
    before = await run_in_threadpool(context.store.quotas.get, client_id)
    stored = await run_in_threadpool(context.store.quotas.put, client_id, body, utc_now())
    guard.forget(client_id)
    details: dict[str, object] = {
        "before": before.model_dump(exclude_none=True) if before else {},
        "after": stored.model_dump(exclude_none=True),
    }
    await run_in_threadpool(
        record, context, admin, "quota.set", f"client:{client_id}", details, client_id
    )
    return stored


@router.get("/v1/audit", response_model=Page[AuditEntry], summary="Recorded changes, oldest first")
def list_audit(
    context: Context,
    client_id: ClientId,
    is_admin: IsAdmin,
    of_client: Annotated[
        str | None,
        Query(alias="client_id", max_length=64, description="Admin keys: one client's entries"),
    ] = None,
    after_cursor: Annotated[str | None, Query(max_length=64, description="An entry id")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Page[AuditEntry]:
    if not is_admin:
        if of_client not in (None, client_id):
            raise PermissionDenied("only an admin key reads another client's audit entries")
        of_client = client_id
    found = context.store.audit.list(of_client, after=after_cursor, limit=limit + 1)
    items = found[:limit]
    return Page[AuditEntry](items=items, next_cursor=items[-1].id if len(found) > limit else None)
