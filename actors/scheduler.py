"""The cron scheduler: one actor fires every due cron trigger (``core.triggers``) and starts every
due memory upkeep (``core.memory_upkeep``: agents' consolidation and retention, the memories
table's compaction).

Plain Python (``cluster/scheduler.py`` makes it the named detached actor ``cron-scheduler``).
Under Ray it starts ticking when constructed, so a restart after a crash resumes by itself; the
store decides what was fired already, so a restart never fires a due time twice. Upkeep runs
elsewhere (``MemoryUpkeepRunner``: a Ray task each) while the scheduler goes on ticking; their
outcome is recorded on the entry when they end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from core.agent_personas import PersonaKey, persona_of
from core.domain import Persona
from core.errors import WonderError
from core.ids import utc_now
from core.jsontypes import JsonObject
from core.memory_upkeep import (
    EntryPlan,
    UpkeepEntry,
    UpkeepRun,
    following_due,
    plan_entries,
    wanted_for_agent,
    wanted_for_table,
)
from core.ports import Conversations, MemoryUpkeepRunner, TurnQuotas
from core.quotas import refuse_turn
from core.sessions import makes_conversation, route
from core.store import Store
from core.trigger_model import CronTrigger
from core.triggers import following_due as trigger_following_due
from core.triggers import message_for

log = logging.getLogger("wonder.scheduler")


@dataclass(frozen=True)
class SchedulerPorts:
    store: Store
    conversations: Conversations
    quotas: TurnQuotas  # a trigger's turn counts toward its client's turn quotas
    upkeep: MemoryUpkeepRunner | None = None  # None: no memory upkeep from this scheduler
    compact_schedule: str | None = None  # the memories table's compaction (None: never)
    reconcile_s: float = 60.0  # how often agents' upkeep policies are read


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
        self.upkept: list[UpkeepRun] = []  # this incarnation's finished upkeep runs, for status
        self._upkeep: dict[str, asyncio.Task[None]] = {}  # running, by entry key
        self._reconciled_at: float | None = None
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
            following = trigger_following_due(trigger, now)
            claimed = await asyncio.to_thread(self.store.triggers.claim, trigger, following)
            if not claimed:  # fired before (by an earlier incarnation): only move on
                await asyncio.to_thread(self.store.triggers.advance, trigger, following)
                continue
            fired.append(await self._fire(trigger))
        self.fired += fired
        if self.ports.upkeep is not None:
            await self.upkeep_tick(now)
        return fired

    # ------------------------------------------------------------------ memory upkeep

    async def upkeep_tick(self, now: datetime) -> list[str]:
        """Read the agents' policies when it is time, then start every due upkeep entry that
        is not running yet; returns the keys started."""
        clock = time.monotonic()
        if self._reconciled_at is None or clock - self._reconciled_at >= self.ports.reconcile_s:
            await asyncio.to_thread(self.reconcile, now)
            self._reconciled_at = clock
        started: list[str] = []
        for entry in await asyncio.to_thread(self.store.memory_upkeep.due, now):
            if entry.key in self._upkeep:
                continue  # still running: claimed once it has ended
            run = UpkeepRun(due_at=entry.next_due, started_at=utc_now())
            following = following_due(entry, now)
            claimed = await asyncio.to_thread(self.store.memory_upkeep.claim, entry, following, run)
            if claimed:
                task = asyncio.get_running_loop().create_task(self._run_upkeep(entry, run))
                self._upkeep[entry.key] = task
                started.append(entry.key)
        return started

    def reconcile(self, now: datetime) -> EntryPlan:
        """Make the stored entries what the agents' policies (and the table's schedule) say."""
        wanted = [w for w in (wanted_for_table(self.ports.compact_schedule),) if w is not None]
        personas: dict[PersonaKey, Persona | None] = {}
        after: str | None = None
        while page := self.store.agents.page(after):
            for agent in page:
                want = wanted_for_agent(agent, persona_of(self.store, agent, personas))
                if want is not None:
                    wanted.append(want)
            after = page[-1].id
        plan = plan_entries(wanted, self.store.memory_upkeep.all(), now)
        self.store.memory_upkeep.save(plan.save)
        self.store.memory_upkeep.remove(plan.remove)
        return plan

    async def _run_upkeep(self, entry: UpkeepEntry, run: UpkeepRun) -> None:
        runner = self.ports.upkeep
        assert runner is not None
        try:
            if entry.policy is None or entry.agent_id is None:
                result = await runner.compact()
            else:
                result = await runner.agent(
                    entry.agent_id, entry.client_id or "", entry.policy, run.started_at
                )
            done = _ended(run, result=result)
        except WonderError as exc:
            log.warning("memory upkeep %s failed: %s", entry.key, exc.message)
            done = _ended(run, error=exc.message)
        except Exception as exc:  # a bug or a lost worker: recorded, the next due time runs again
            log.exception("memory upkeep %s failed", entry.key)
            done = _ended(run, error=repr(exc))
        try:
            await asyncio.to_thread(self.store.memory_upkeep.finish, entry.key, done)
        finally:  # recorded (or not): the next due time may start it again
            self._upkeep.pop(entry.key, None)
        self.upkept.append(done)
        log.info("memory upkeep %s: %s", entry.key, done.result if done.ok else done.error)

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
            "upkeep_running": sorted(self._upkeep),
            "upkept": [run.model_dump(mode="json") for run in self.upkept[-100:]],
        }


def _ended(run: UpkeepRun, result: JsonObject | None = None, error: str | None = None) -> UpkeepRun:
    """``run`` as it ended: with its result, or with why it failed."""
    ended = {"finished_at": utc_now(), "ok": error is None, "error": error}
    return run.model_copy(update={**ended, "result": result or {}})
