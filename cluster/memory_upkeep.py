"""Scheduled memory upkeep on Ray: each run is a Ray task (``jobs.upkeep`` for an agent,
``jobs.compact`` for the memories table), started by the cron scheduler and awaited there.

A task takes half a CPU, as the consolidate job's per-agent tasks do: upkeep is batch work that
must not starve conversations, and Ray queues it when the cluster is busy. It builds its ports in
its worker, once per process (``upkeep_ports``).
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import ray

from cluster import placement, wiring
from cluster.executor import run_to_end
from cluster.memory_access import ServedEmbedders
from cluster.models import ServedChatModels
from core.errors import NotFound
from core.jsontypes import JsonObject
from core.memory_policy import MemoryUpkeepPolicy
from core.secret_vault import SecretVault
from core.settings import settings_from_env, wonder_env
from core.store import store_for_settings
from jobs.compact import CompactOptions, run_compact
from jobs.upkeep import UpkeepPorts, run_agent_upkeep

UPKEEP_CPUS = 0.5


@functools.lru_cache(maxsize=8)
def _ports(key: tuple[tuple[str, str], ...]) -> UpkeepPorts:
    env = dict(key)
    settings = settings_from_env(env)
    store = store_for_settings(settings)
    return UpkeepPorts(
        store=store,
        chat_models=ServedChatModels(settings, SecretVault(store, settings)),
        embedders=ServedEmbedders(env),
        tasks=wiring.task_runner(env),
        workflows=wiring.workflows(env),
        settings_env=env,
    )


def upkeep_ports(settings_env: dict[str, str]) -> UpkeepPorts:
    return _ports(tuple(sorted(wonder_env(settings_env).items())))


def agent_upkeep(
    settings_env: dict[str, str],
    agent_id: str,
    client_id: str,
    policy_json: str,
    now: datetime,
) -> JsonObject:
    """Ray entry point: one agent's upkeep in this worker."""
    policy = MemoryUpkeepPolicy.model_validate_json(policy_json)
    settings = settings_from_env(settings_env)
    work = run_agent_upkeep(agent_id, client_id, policy, now, settings, upkeep_ports(settings_env))
    return run_to_end(work)


def table_compaction(settings_env: dict[str, str]) -> JsonObject:
    """Ray entry point: the memories table's indexes and compaction."""
    settings = settings_from_env(settings_env)
    try:
        return run_compact(CompactOptions(), settings)
    except NotFound:  # no memories table yet
        return {"job": "compact", "memories": 0}


class RayMemoryUpkeep:
    """``MemoryUpkeepRunner`` on Ray tasks."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env
        options: dict[str, Any] = {
            "num_cpus": UPKEEP_CPUS,
            "max_retries": 1,
            **placement.executor_options(settings_from_env(settings_env)),
        }
        self._agent = ray.remote(**options)(agent_upkeep)
        self._compact = ray.remote(**options)(table_compaction)

    async def agent(
        self, agent_id: str, client_id: str, policy: MemoryUpkeepPolicy, now: datetime
    ) -> JsonObject:
        ref = self._agent.remote(
            self.settings_env, agent_id, client_id, policy.model_dump_json(), now
        )
        result: JsonObject = await ref
        return result

    async def compact(self) -> JsonObject:
        result: JsonObject = await self._compact.remote(self.settings_env)
        return result
