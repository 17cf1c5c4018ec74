"""Webhooks: manage hooks (``/v1/hooks``, API key: ``router``) and receive signed deliveries
(``POST /v1/hooks/{id}``, no API key: the HMAC signature is the credential; ``delivery_router``;
``core.hooks``).

A hook made by a user (``X-Wonder-User``) is that user's: other users do not see it (404), and
each delivery posts as that user, checked where it lands as the user's own message would be (a
user who lost access there makes the delivery fail, not post)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.errors import Conflict, InvalidInput
from core.hook_model import Hook
from core.hooks import delivery_content, replay_expiry, verify_delivery
from core.ids import new_id, utc_now
from core.routes import Route
from core.sessions import check_route
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.protocol import (
    MAX_MESSAGE_CHARS,
    Deleted,
    Items,
    MessageCreate,
    RouteTarget,
    WireModel,
)
from serving.gateway.quota_checks import admit_turn
from serving.gateway.sessions import MessageRouted, send_routed

router = APIRouter(prefix="/v1/hooks", tags=["hooks"])
delivery_router = APIRouter(prefix="/v1/hooks", tags=["hooks"])


class HookCreate(WireModel):
    route: RouteTarget = Field(
        description="Where deliveries go: a persona (the usual), a session or a thread"
    )
    title: str | None = Field(None, max_length=200)


class HookOut(WireModel):
    id: str
    route: Route
    title: str | None
    created_at: datetime
    user_id: str | None = Field(None, description="The user who made it (deliveries post as it)")


class HookCreated(HookOut):
    secret: str = Field(description="Signs deliveries (HMAC-SHA256); shown only now")


def _out(hook: Hook) -> HookOut:
    return HookOut(
        id=hook.id,
        route=hook.route,
        title=hook.title,
        created_at=hook.created_at,
        user_id=hook.user_id,
    )


@router.post("", status_code=201, response_model=HookCreated, summary="Create a webhook")
def create_hook(
    body: HookCreate, context: Context, client_id: ClientId, user: User, audit: Audit
) -> HookCreated:
    route = body.route.as_route()
    check_route(context.store, client_id, route, user)
    hook = Hook(
        id=new_id("hook"),
        client_id=client_id,
        secret=secrets.token_hex(32),
        route=route,
        title=body.title,
        created_at=utc_now(),
        user_id=user,
    )
    context.store.hooks.insert(hook)
    audit.record(
        "hook.create", f"hook:{hook.id}", {"route": route.model_dump(), "title": hook.title}
    )
    return HookCreated(**_out(hook).model_dump(), secret=hook.secret)


@router.get("", response_model=Items[HookOut], summary="List your webhooks (without secrets)")
def list_hooks(context: Context, client_id: ClientId, user: User) -> Items[HookOut]:
    hooks = context.store.hooks.for_client(client_id)
    mine = [h for h in hooks if user is None or h.user_id == user]  # a user: its own
    return Items[HookOut](items=[_out(h) for h in mine])


@router.get("/{hook_id}", response_model=HookOut, summary="Get a webhook (without its secret)")
def get_hook(hook_id: str, context: Context, client_id: ClientId) -> HookOut:
    return _out(context.store.hooks.get(hook_id, client_id=client_id))


@router.delete("/{hook_id}", response_model=Deleted, summary="Delete a webhook")
def delete_hook(hook_id: str, context: Context, client_id: ClientId, audit: Audit) -> Deleted:
    hook = context.store.hooks.get(hook_id, client_id=client_id)
    context.store.hooks.delete(hook_id, client_id)
    audit.record("hook.delete", f"hook:{hook_id}", {"route": hook.route.model_dump()})
    return Deleted(deleted=[hook_id])


class HookDelivery(MessageRouted):
    replayed: bool = Field(
        False,
        description="True for a repeat of a delivery already taken in (same timestamp and "
        "signature, inside the window): this is the first one's result; no second turn started",
    )


@delivery_router.post(
    "/{hook_id}",
    status_code=202,
    response_model=HookDelivery,
    responses={
        200: {
            "model": HookDelivery,
            "description": "A repeated delivery: the first's result, with replayed: true",
        }
    },
    summary="Deliver to a webhook: signed with X-Wonder-Timestamp and X-Wonder-Signature "
    "(sha256=HMAC of '<timestamp>.<body>'); the body (or its JSON 'content') becomes a message; "
    "a repeat inside the replay window is answered 200 with the first's result",
)
async def deliver(
    hook_id: str,
    request: Request,
    response: Response,
    context: Context,
    guard: Guard,
    x_wonder_timestamp: Annotated[str | None, Header(max_length=32)] = None,
    x_wonder_signature: Annotated[str | None, Header(max_length=200)] = None,
) -> HookDelivery:
    hook = await run_in_threadpool(context.store.hooks.get, hook_id)
    body = await request.body()
    window = context.settings.hook_replay_window_s
    signed = verify_delivery(hook, x_wonder_timestamp, x_wonder_signature, body, utc_now(), window)
    assert x_wonder_timestamp is not None  # verified
    content = delivery_content(body)
    if len(content) > MAX_MESSAGE_CHARS:
        raise InvalidInput(f"the delivery's message is over {MAX_MESSAGE_CHARS} characters")
    author = f"hook:{hook.id}"
    await admit_turn(guard, hook.client_id, author)
    expires = replay_expiry(x_wonder_timestamp, window)
    first, result = await run_in_threadpool(
        context.store.hooks.claim_delivery, hook.id, signed, expires, utc_now()
    )
    if not first:
        if result is None:
            raise Conflict("this delivery is being taken in now; it is not taken twice")
        response.status_code = 200
        return HookDelivery.model_validate_json(result).model_copy(update={"replayed": True})
    message = MessageCreate(content=content, source="webhook")
    try:  # as the user who made the hook, checked where it lands
        routed = await send_routed(
            context, guard, hook.client_id, hook.route, message, hook.user_id, author=author
        )
    except Exception:  # not taken in (refused, failed): the sender's retry may be
        await run_in_threadpool(context.store.hooks.release_delivery, hook.id, signed)
        raise
    delivered = HookDelivery(**routed.model_dump())
    await run_in_threadpool(
        context.store.hooks.record_delivery, hook.id, signed, delivered.model_dump_json()
    )
    return delivered
