"""Quotas per user inside a client (issue 17): the users a client's app names with
``X-Wonder-User``.

``PUT /v1/users/{user_id}/quota`` sets one (a key with the admin scope; recorded in the audit
trail), ``DELETE`` clears it, ``GET`` reads it (any key of the client), ``GET /v1/user-quotas``
lists the client's users that have one. A user's quota limits that user's requests per second,
concurrent turns and model tokens per day; the client's own quota applies on top
(docs/security.md).
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.ids import utc_now
from core.quotas import UserQuota
from serving.gateway.audit_trail import Audit, Auditor
from serving.gateway.auth import ClientId, Context, Guard, KeyAdmin
from serving.gateway.members import UserPath
from serving.gateway.protocol import Items, WireModel

router = APIRouter(tags=["quotas and audit"])


class UserQuotaOut(WireModel):
    user_id: str
    quota: UserQuota = Field(description="Fields left out are unlimited")


@router.get(
    "/v1/user-quotas",
    response_model=Items[UserQuotaOut],
    response_model_exclude_none=True,
    summary="Your users that have a quota of their own",
)
def list_user_quotas(context: Context, client_id: ClientId) -> Items[UserQuotaOut]:
    quotas = context.store.quotas
    return Items[UserQuotaOut](
        items=[
            UserQuotaOut(user_id=user_id, quota=quotas.get_user(client_id, user_id) or UserQuota())
            for user_id in quotas.users_with_quotas(client_id)
        ]
    )


@router.get(
    "/v1/users/{user_id}/quota",
    response_model=UserQuota,
    response_model_exclude_none=True,
    summary="A user's quota in your client (empty: only the client's quota applies)",
)
def get_user_quota(user_id: UserPath, context: Context, client_id: ClientId) -> UserQuota:
    return context.store.quotas.get_user(client_id, user_id) or UserQuota()


@router.put(
    "/v1/users/{user_id}/quota",
    response_model=UserQuota,
    response_model_exclude_none=True,
    summary="Set a user's quota (a key with the admin scope); omitted fields are unlimited",
)
async def put_user_quota(
    user_id: UserPath,
    body: UserQuota,
    context: Context,
    admin: KeyAdmin,
    guard: Guard,
    audit: Audit,
) -> UserQuota:
    client_id = admin.client_id
    before = await run_in_threadpool(context.store.quotas.get_user, client_id, user_id)
    stored = await run_in_threadpool(
        context.store.quotas.put_user, client_id, user_id, body, utc_now()
    )
    guard.forget(client_id)
    await _audit(audit, client_id, user_id, before, stored)
    return stored


@router.delete(
    "/v1/users/{user_id}/quota",
    response_model=UserQuota,
    response_model_exclude_none=True,
    summary="Clear a user's quota (a key with the admin scope): only the client's applies",
)
async def delete_user_quota(
    user_id: UserPath, context: Context, admin: KeyAdmin, guard: Guard, audit: Audit
) -> UserQuota:
    client_id = admin.client_id
    before = await run_in_threadpool(context.store.quotas.get_user, client_id, user_id)
    if await run_in_threadpool(context.store.quotas.delete_user, client_id, user_id):
        guard.forget(client_id)
        await _audit(audit, client_id, user_id, before, None)
    return UserQuota()


async def _audit(
    audit: Auditor,
    client_id: str,
    user_id: str,
    before: UserQuota | None,
    after: UserQuota | None,
) -> None:
    details: dict[str, object] = {
        "user_id": user_id,
        "before": before.model_dump(exclude_none=True) if before else {},
        "after": after.model_dump(exclude_none=True) if after else {},
    }
    await run_in_threadpool(audit.record, "quota.set", f"user:{user_id}", details, client_id)
