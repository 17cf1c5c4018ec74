"""Cron triggers (seed 004's triggers; issue 11): a schedule and a message template, routed like
``POST /v1/messages`` (default: a persona's main session), with ``source: cron``.

One scheduler (``actors/scheduler.py``) fires them. It claims a due time by recording it
(``trigger_fires``) in the same transaction that moves the trigger to its next due time, and only
then posts the message: a due time fires at most once, across scheduler restarts too. A scheduler
that was down fires each overdue trigger once (for its latest missed due time), then follows the
schedule from now.
"""

from __future__ import annotations

from datetime import datetime

from core.cron import next_due, parse_cron
from core.ids import new_id, utc_now
from core.routes import Route
from core.sessions import check_route
from core.store import Store
from core.trigger_model import CronTrigger


def create_trigger(
    store: Store,
    client_id: str,
    schedule: str,
    template: str,
    route: Route,
    user: str | None = None,
) -> CronTrigger:
    """A new trigger, first due at the schedule's next time (``InvalidInput`` for a bad schedule,
    ``NotFound`` for a route to nothing of the client's). Made by ``user``, it posts as that user
    (checked now and each time it fires: a user who lost access makes it fail, not post)."""
    check_route(store, client_id, route, user)
    now = utc_now()
    trigger = CronTrigger(
        id=new_id("trigger"),
        client_id=client_id,
        schedule=schedule,
        template=template,
        route=route,
        next_due=next_due(parse_cron(schedule), now),
        created_at=now,
        user_id=user,
    )
    return store.triggers.save(trigger)


def following_due(trigger: CronTrigger, now: datetime) -> datetime:
    """The due time after the current one (missed ones skipped: at most one catch-up)."""
    return next_due(parse_cron(trigger.schedule), max(trigger.next_due, now))


def message_for(trigger: CronTrigger) -> str:
    return trigger.template.replace("{{due_at}}", trigger.next_due.isoformat())
