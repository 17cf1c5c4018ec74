"""Cron triggers: ``/v1/triggers`` (``core.triggers``; fired by the ``cron-scheduler`` actor).

A trigger made by a user (``X-Wonder-User``) is that user's: other users do not see it (404), and
it posts as that user (``serving.gateway.member_access``, ``core.sessions``)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field

from core.cron import CRON_PATTERN, parse_cron, shortest_interval_s
from core.errors import InvalidInput
from core.trigger_model import CronTrigger
from core.triggers import create_trigger
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.protocol import MAX_MESSAGE_CHARS, Deleted, Items, RouteTarget, WireModel

router = APIRouter(prefix="/v1/triggers", tags=["triggers"])


class TriggerCreate(WireModel):
    schedule: str = Field(
        max_length=200,
        pattern=CRON_PATTERN,
        description="Five cron fields (UTC), e.g. '0 9 * * 1-5'",
    )
    template: str = Field(
        min_length=1,
        max_length=MAX_MESSAGE_CHARS,
        description="The message each time; {{due_at}} becomes the due time",
    )
    route: RouteTarget = Field(description="Where it goes: usually a persona (its main session)")


class TriggerOut(CronTrigger):
    fired: list[str] = Field(default_factory=list, description="Due times fired so far")


@router.post("", status_code=201, response_model=CronTrigger, summary="Create a cron trigger")
def create(
    body: TriggerCreate,
    context: Context,
    client_id: ClientId,
    user: User,
    audit: Audit,
    guard: Guard,
) -> CronTrigger:
    minimum = context.settings.trigger_min_interval_s
    shortest = shortest_interval_s(parse_cron(body.schedule))
    if shortest < minimum:
        raise InvalidInput(
            f"schedule: {body.schedule!r} fires every {shortest} s at times; this deployment "
            f"allows at least {minimum} s between firings (WONDER_TRIGGER_MIN_INTERVAL_S)"
        )
    guard.admit_trigger(client_id)
    trigger = create_trigger(
        context.store, client_id, body.schedule, body.template, body.route.as_route(), user
    )
    details = {"schedule": trigger.schedule, "route": trigger.route.model_dump()}
    audit.record("trigger.create", f"trigger:{trigger.id}", details)
    return trigger


@router.get("", response_model=Items[CronTrigger], summary="List your cron triggers")
def list_triggers(context: Context, client_id: ClientId, user: User) -> Items[CronTrigger]:
    found = context.store.triggers.for_client(client_id, limit=context.settings.list_max_items)
    return Items[CronTrigger](items=[t for t in found if user is None or t.user_id == user])


@router.get("/{trigger_id}", response_model=TriggerOut, summary="A trigger and its fired times")
def get_trigger(trigger_id: str, context: Context, client_id: ClientId) -> TriggerOut:
    trigger = context.store.triggers.get(trigger_id, client_id=client_id)
    fired = context.store.triggers.fired(trigger_id)
    return TriggerOut(**trigger.model_dump(), fired=fired)


@router.delete("/{trigger_id}", response_model=Deleted, summary="Delete a cron trigger")
def delete_trigger(trigger_id: str, context: Context, client_id: ClientId, audit: Audit) -> Deleted:
    trigger = context.store.triggers.get(trigger_id, client_id=client_id)
    context.store.triggers.delete(trigger_id, client_id)
    details = {"schedule": trigger.schedule, "route": trigger.route.model_dump()}
    audit.record("trigger.delete", f"trigger:{trigger_id}", details)
    return Deleted(deleted=[trigger_id])
