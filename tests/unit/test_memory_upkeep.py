"""Memory upkeep on a schedule: the policy (``core.memory_policy``), the entries' planning
(``core.memory_upkeep``), and the scheduler's upkeep ticks (``actors/scheduler.py``) over a real
SQLite store, with a runner that records what it was asked to run (the port's fake)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.scheduler import CronScheduler, SchedulerPorts
from core.domain import NAME_PATTERN, Agent, Persona, PersonaRef
from core.errors import InvalidInput
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.memory_policy import LIBRARY_ID_PATTERN, MemoryUpkeepPolicy
from core.memory_upkeep import (
    TABLE_KEY,
    UpkeepEntry,
    UpkeepRun,
    Wanted,
    agent_key,
    effective_policy,
    plan_entries,
    retention_cutoff,
    strategy_summary,
)
from core.store import Store
from core.turn_quotas import StoredQuotas
from tests.factories import make_agent, make_client, scripted_profile

NOW = datetime(2026, 3, 10, 12, 0, 30, tzinfo=UTC)


def policy(**fields: Any) -> MemoryUpkeepPolicy:
    return MemoryUpkeepPolicy.model_validate(fields)


def test_the_library_id_grammar_is_the_domains() -> None:
    assert LIBRARY_ID_PATTERN == NAME_PATTERN


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schedule": "0 0 30 2 *"}, "names no time that exists"),
        ({"schedule": "61 * * * *"}, "schedule"),
        (
            {"consolidation": {"strategy_task_id": "a", "strategy_workflow": "b"}},
            "exclusive: one consolidation strategy",
        ),
        ({"consolidation": {"group_size": 2, "min_group": 3}}, "min_group must not exceed"),
        ({"retention": {"archived_days": -1}}, "greater than or equal to 0"),
        ({"consolidation": {"strategy_task_id": "../etc"}}, "pattern"),
    ],
)
def test_a_bad_policy_is_refused_with_its_reason(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        policy(**fields)


def test_a_persona_has_one_extraction_hook_a_task_or_a_workflow() -> None:
    with pytest.raises(ValidationError, match="memory_extraction_task_id and memory_extraction_"):
        Persona(
            id="p", system_prompt="s", memory_extraction_task_id="t", memory_extraction_workflow="w"
        )
    persona = Persona(id="p", system_prompt="s", memory_extraction_workflow="w")
    assert persona.extraction_hook == "w"
    schema = Persona.model_json_schema()
    required = [rule["not"]["required"] for rule in schema["allOf"]]
    assert ["memory_extraction_task_id", "memory_extraction_workflow"] in required


def _agent(own: MemoryUpkeepPolicy | None = None) -> Agent:
    return Agent(
        id="agent_1",
        client_id="c",
        name="a",
        persona_ref=PersonaRef(id="p"),
        created_at=NOW,
        memory_upkeep=own,
    )


def test_an_agents_own_policy_wins_over_its_personas_and_can_turn_it_off() -> None:
    persona = Persona(id="p", system_prompt="s", memory_upkeep=policy(schedule="0 1 * * *"))
    assert effective_policy(_agent(), persona) == persona.memory_upkeep
    mine = policy(schedule="0 2 * * *")
    assert effective_policy(_agent(mine), persona) == mine
    assert effective_policy(_agent(policy(enabled=False)), persona) is None
    assert effective_policy(_agent(), Persona(id="p", system_prompt="s")) is None
    assert effective_policy(_agent(), None) is None


def _entry(key: str, schedule: str, pol: MemoryUpkeepPolicy | None, due: datetime) -> UpkeepEntry:
    return UpkeepEntry(key=key, schedule=schedule, policy=pol, next_due=due)


def test_entries_follow_the_policies() -> None:
    daily, hourly = policy(schedule="0 3 * * *"), policy(schedule="5 * * * *")
    kept_due = datetime(2026, 3, 11, 3, 0, tzinfo=UTC)
    stored = [
        _entry(agent_key("same"), "0 3 * * *", daily, kept_due),
        _entry(agent_key("moved"), "0 3 * * *", daily, kept_due),
        _entry(agent_key("retuned"), "0 3 * * *", daily, kept_due),
        _entry(agent_key("gone"), "0 3 * * *", daily, kept_due),
    ]
    retuned = policy(schedule="0 3 * * *", retention={"archived_days": 7})
    wanted = [
        Wanted(agent_key("same"), "0 3 * * *", "c", "same", daily),
        Wanted(agent_key("moved"), "5 * * * *", "c", "moved", hourly),
        Wanted(agent_key("retuned"), "0 3 * * *", "c", "retuned", retuned),
        Wanted(agent_key("new"), "0 3 * * *", "c", "new", daily),
        Wanted(TABLE_KEY, "41 * * * *"),
    ]
    plan = plan_entries(wanted, stored, NOW)
    saved = {e.key: e for e in plan.save}
    assert plan.remove == (agent_key("gone"),)
    assert set(saved) == {agent_key(k) for k in ("moved", "retuned", "new")} | {TABLE_KEY}
    assert saved[agent_key("moved")].next_due == datetime(2026, 3, 10, 12, 5, tzinfo=UTC)
    assert saved[agent_key("retuned")].next_due == kept_due  # a policy change keeps its time
    assert saved[agent_key("retuned")].policy == retuned
    assert saved[agent_key("new")].next_due == datetime(2026, 3, 11, 3, 0, tzinfo=UTC)
    assert saved[TABLE_KEY].next_due == datetime(2026, 3, 10, 12, 41, tzinfo=UTC)
    assert saved[TABLE_KEY].policy is None


def test_retention_cutoff_and_strategy_answers() -> None:
    assert retention_cutoff(policy(), NOW) is None
    kept = policy(retention={"archived_days": 30})
    assert retention_cutoff(kept, NOW) == NOW - timedelta(days=30)
    assert strategy_summary("  a summary ", 100) == "a summary"
    assert strategy_summary({"summary": "s" * 50}, 10) == "s" * 10
    assert strategy_summary({"text": "from an llm action"}, 100) == "from an llm action"
    assert strategy_summary({"memories": []}, 100) is None
    assert strategy_summary("   ", 100) is None
    assert strategy_summary(42, 100) is None


# --------------------------------------------------------------------------- the scheduler


class RecordedUpkeep:
    """The upkeep runner port: records each run; a run waits until ``release`` is set."""

    def __init__(self) -> None:
        self.agents: list[tuple[str, str, MemoryUpkeepPolicy]] = []
        self.compactions = 0
        self.release = asyncio.Event()
        self.fail_with: Exception | None = None

    async def agent(
        self, agent_id: str, client_id: str, policy: MemoryUpkeepPolicy, now: datetime
    ) -> JsonObject:
        self.agents.append((agent_id, client_id, policy))
        await self.release.wait()
        if self.fail_with is not None:
            raise self.fail_with
        return {"job": "memory_upkeep", "agent_id": agent_id, "summaries": 1}

    async def compact(self) -> JsonObject:
        self.compactions += 1
        return {"job": "compact"}


class NoConversations:
    async def post_message(self, *_: object, **__: object) -> None:
        raise AssertionError("no trigger in these tests")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


async def _driven(ports: SchedulerPorts) -> CronScheduler:
    """A scheduler that does not tick by itself (made where no loop runs): the test ticks."""
    return await asyncio.to_thread(CronScheduler, lambda: ports, 60)


async def _settle(scheduler: CronScheduler) -> None:
    while scheduler._upkeep:  # the runs started by the tick
        await asyncio.sleep(0.01)


async def test_the_scheduler_runs_each_due_policy_once_and_records_it(store: Store) -> None:
    client_id, _ = make_client(store)
    profile = scripted_profile(store)
    on = policy(schedule="0 3 * * *", consolidation={"strategy_task_id": "summarise"})
    with_policy = make_agent(store, client_id, profile, memory_upkeep=on)
    without = make_agent(store, client_id, profile)
    own = store.agents.save(
        make_agent(store, client_id, profile).model_copy(
            update={"memory_upkeep": policy(schedule="30 4 * * *")}
        )
    )
    runner = RecordedUpkeep()
    ports = SchedulerPorts(
        store=store,
        conversations=NoConversations(),  # type: ignore[arg-type]
        quotas=StoredQuotas(store),
        upkeep=runner,
        compact_schedule="41 * * * *",
    )
    scheduler = await _driven(ports)
    assert await scheduler.upkeep_tick(utc_now()) == []  # reconciled; nothing due yet
    keys = {e.key for e in store.memory_upkeep.all()}
    assert keys == {agent_key(with_policy.id), agent_key(own.id), TABLE_KEY}
    assert agent_key(without.id) not in keys

    now = utc_now()
    store.memory_upkeep.request_now(agent_key(with_policy.id), now)
    store.memory_upkeep.request_now(TABLE_KEY, now)
    started = await scheduler.upkeep_tick(now)
    assert sorted(started) == sorted([agent_key(with_policy.id), TABLE_KEY])
    await asyncio.sleep(0.05)
    assert runner.agents == [(with_policy.id, client_id, on)] and runner.compactions == 1
    # Running: not started twice, and its next due time is the schedule's.
    assert await scheduler.upkeep_tick(now) == []
    entry = store.memory_upkeep.get(agent_key(with_policy.id))
    assert entry.next_due > now and entry.next_due.hour == 3 and entry.runs == 1
    assert entry.last_run is not None and entry.last_run.ok is None  # started, not ended
    runner.release.set()
    await _settle(scheduler)
    entry = store.memory_upkeep.get(agent_key(with_policy.id))
    assert entry.last_run is not None and entry.last_run.ok is True
    assert entry.last_run.result["summaries"] == 1
    assert len(runner.agents) == 1


async def test_a_failed_run_is_recorded_and_a_removed_policy_removes_its_entry(
    store: Store,
) -> None:
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store), memory_upkeep=policy())
    runner = RecordedUpkeep()
    runner.release.set()
    runner.fail_with = InvalidInput("consolidation task summarise answered no summary")
    ports = SchedulerPorts(
        store=store,
        conversations=NoConversations(),  # type: ignore[arg-type]
        quotas=StoredQuotas(store),
        upkeep=runner,
        reconcile_s=0.01,
    )
    scheduler = await _driven(ports)
    await scheduler.upkeep_tick(utc_now())
    store.memory_upkeep.request_now(agent_key(agent.id), utc_now())
    assert await scheduler.upkeep_tick(utc_now()) == [agent_key(agent.id)]
    await _settle(scheduler)
    last = store.memory_upkeep.get(agent_key(agent.id)).last_run
    assert last is not None and last.ok is False
    assert last.error == "consolidation task summarise answered no summary"
    # The agent turns its persona's upkeep off: the entry goes at the next reconcile.
    store.agents.save(agent.model_copy(update={"memory_upkeep": policy(enabled=False)}))
    await asyncio.sleep(0.02)
    await scheduler.upkeep_tick(utc_now())
    assert store.memory_upkeep.find(agent_key(agent.id)) is None
    assert [e.key for e in store.memory_upkeep.all()] == []  # no compaction schedule given


def test_a_due_time_is_claimed_once(store: Store) -> None:
    entry = UpkeepEntry(
        key=agent_key(new_id("agent")),
        schedule="* * * * *",
        policy=policy(),
        next_due=NOW,
    )
    store.memory_upkeep.save([entry])
    run = UpkeepRun(due_at=NOW, started_at=NOW)
    later = NOW + timedelta(minutes=1)
    assert store.memory_upkeep.claim(entry, later, run)
    assert not store.memory_upkeep.claim(entry, later, run)  # read at the old due time
    assert store.memory_upkeep.get(entry.key).next_due == later
