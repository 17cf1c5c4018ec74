"""Webhooks: manage hooks (``/v1/hooks``, API key) and receive signed deliveries
(``POST /v1/hooks/{id}``, no API key: the HMAC signature is the credential; ``core.hooks``)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.errors import InvalidInput
from core.hook_model import Hook
from core.hooks import delivery_content, verify_delivery
from core.ids import new_id, utc_now
from core.routes import Route
from serving.gateway.auth import ClientId, Context, Guard
from serving.gateway.protocol import MAX_MESSAGE_CHARS, Deleted, Items, MessageCreate, WireModel
from serving.gateway.sessions import MessageRouted, RouteTarget, send_routed

router = APIRouter(prefix="/v1/hooks", tags=["hooks"])


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


class HookCreated(HookOut):
    secret: str = Field(description="Signs deliveries (HMAC-SHA256); shown only now")


def _out(hook: Hook) -> HookOut:
    return HookOut(id=hook.id, route=hook.route, title=hook.title, created_at=hook.created_at)


def route_of(target: RouteTarget) -> Route:
    if target.thread is not None:
        return Route(kind="thread", target=target.thread)
    if target.session is not None:
        return Route(kind="session", target=target.session)
    assert target.persona is not None
    return Route(kind="persona", target=target.persona)


@router.post("", status_code=201, response_model=HookCreated, summary="Create a webhook")
def create_hook(body: HookCreate, context: Context, client_id: ClientId) -> HookCreated:
    hook = Hook(
        id=new_id("hook"),
        client_id=client_id,
        secret=secrets.token_hex(32),
        route=route_of(body.route),
        title=body.title,
        created_at=utc_now(),
    )
    context.store.hooks.insert(hook)
    return HookCreated(**_out(hook).model_dump(), secret=hook.secret)


@router.get("", response_model=Items[HookOut], summary="List your webhooks (without secrets)")
def list_hooks(context: Context, client_id: ClientId) -> Items[HookOut]:
    return Items[HookOut](items=[_out(h) for h in context.store.hooks.for_client(client_id)])


@router.get("/{hook_id}", response_model=HookOut, summary="Get a webhook (without its secret)")
def get_hook(hook_id: str, context: Context, client_id: ClientId) -> HookOut:
    return _out(context.store.hooks.get(hook_id, client_id=client_id))


@router.delete("/{hook_id}", response_model=Deleted, summary="Delete a webhook")
def delete_hook(hook_id: str, context: Context, client_id: ClientId) -> Deleted:
    context.store.hooks.get(hook_id, client_id=client_id)
    context.store.hooks.delete(hook_id, client_id)
    return Deleted(deleted=[hook_id])


@router.post(
    "/{hook_id}",
    status_code=202,
    response_model=MessageRouted,
    summary="Deliver to a webhook: signed with X-Wonder-Timestamp and X-Wonder-Signature "
    "(sha256=HMAC of '<timestamp>.<body>'); the body (or its JSON 'content') becomes a message",
)
async def deliver(
    hook_id: str,
    request: Request,
    context: Context,
    guard: Guard,
    x_wonder_timestamp: Annotated[str | None, Header(max_length=32)] = None,
    x_wonder_signature: Annotated[str | None, Header(max_length=200)] = None,
) -> MessageRouted:
    hook = await run_in_threadpool(context.store.hooks.get, hook_id)
    body = await request.body()
    window = context.settings.hook_replay_window_s
    verify_delivery(hook, x_wonder_timestamp, x_wonder_signature, body, utc_now(), window)
    content = delivery_content(body)
    if len(content) > MAX_MESSAGE_CHARS:
        raise InvalidInput(f"the delivery's message is over {MAX_MESSAGE_CHARS} characters")
    author = f"hook:{hook.id}"
    await run_in_threadpool(guard.admit_turn, hook.client_id, author)
    message = MessageCreate(content=content, source="webhook", user_id=author)
    return await send_routed(context, hook.client_id, hook.route.kind, hook.route.target, message)
