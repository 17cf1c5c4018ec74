"""The cron scheduler: one actor fires every due cron trigger (``core.triggers``).

Plain Python (``cluster/scheduler.py`` makes it the named detached actor ``cron-scheduler``).
Under Ray it starts ticking when constructed, so a restart after a crash resumes by itself; the
store decides what was fired already, so a restart never fires a due time twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import WonderError
from core.ids import utc_now
from core.ports import Conversations, TurnQuotas
from core.quotas import refuse_turn
from core.sessions import makes_conversation, route
from core.store import Store
from core.trigger_model import CronTrigger
from core.triggers import following_due, message_for

log = logging.getLogger("wonder.scheduler")


@dataclass(frozen=True)
class SchedulerPorts:
    store: Store
    conversations: Conversations
    quotas: TurnQuotas  # a trigger's turn counts toward its client's turn quotas


@dataclass(frozen=True)
class Fired:
    trigger_id: str
    due_at: str
    conversation_id: str | None
    turn_id: str | None
    error: str | None = None


class CronScheduler:
    def __init__(self, ports: Callable[[], SchedulerPorts], tick_s: float) -> None:
        self.ports = ports()
        self.store = self.ports.store
        self.tick_s = tick_s
        self.fired: list[Fired] = []  # this incarnation's, for status
        self._loop: asyncio.Task[None] | None = None
        try:
            self._loop = asyncio.get_running_loop().create_task(self._run())
        except RuntimeError:
            pass  # built without a loop (tests): call tick()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the next tick tries again
                log.exception("cron tick failed")
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> list[Fired]:
        """Fire every trigger due now (each due time at most once)."""
        now = utc_now()
        fired: list[Fired] = []
        for trigger in await asyncio.to_thread(self.store.triggers.due, now):
            following = following_due(trigger, now)
            claimed = await asyncio.to_thread(self.store.triggers.claim, trigger, following)
            if not claimed:  # fired before (by an earlier incarnation): only move on
                await asyncio.to_thread(self.store.triggers.advance, trigger, following)
                continue
            fired.append(await self._fire(trigger))
        self.fired += fired
        return fired

    async def _fire(self, trigger: CronTrigger) -> Fired:
        due = trigger.next_due.isoformat()
        author = f"trigger:{trigger.id}"
        admission = await asyncio.to_thread(
            self.ports.quotas.admission, trigger.client_id, author, utc_now()
        )
        over = refuse_turn(admission)
        if over is None and await asyncio.to_thread(
            makes_conversation, self.store, trigger.client_id, trigger.route
        ):  # a fork or a persona's main session: one more conversation of the client's
            over = await asyncio.to_thread(
                self.ports.quotas.conversation_refusal, trigger.client_id
            )
        if over is not None:  # claimed, so not retried: this due time is skipped
            log.warning("trigger %s due %s over quota: %s", trigger.id, due, over.message)
            return Fired(trigger.id, due, None, None, f"quota: {over.message}")
        try:
            kind, target = trigger.route.kind, trigger.route.target
            destination = await asyncio.to_thread(  # as the user who made it, if one did
                route, self.store, trigger.client_id, kind, target, trigger.user_id
            )
            ack = await self.ports.conversations.post_message(
                destination.conversation_id,
                message_for(trigger),
                author,
                source="cron",
            )
        except WonderError as exc:  # claimed, so not retried: at most once
            log.warning("trigger %s due %s could not post: %s", trigger.id, due, exc.message)
            return Fired(trigger.id, due, None, None, exc.message)
        except Exception as exc:  # a bug: reported the same way, the next trigger still fires
            log.exception("trigger %s due %s failed", trigger.id, due)
            return Fired(trigger.id, due, None, None, repr(exc))
        return Fired(trigger.id, due, destination.conversation_id, ack.turn_id)

    async def status(self) -> dict[str, object]:
        return {
            "tick_s": self.tick_s,
            "fired": [f.__dict__ for f in self.fired],
        }
