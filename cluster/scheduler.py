"""The cron scheduler on Ray: the named detached actor ``cron-scheduler`` (one per cluster, on the
head node, restarted after a crash; ``actors/scheduler.py``). Every gateway replica makes sure it
exists when it starts."""

from __future__ import annotations

import functools
from typing import Any

from actors.scheduler import CronScheduler, SchedulerPorts
from cluster import placement, wiring
from cluster.memory_upkeep import RayMemoryUpkeep
from cluster.naming import SCHEDULER_NAME, named_detached
from core.settings import settings_from_env
from core.store import store_for_settings
from core.turn_quotas import StoredQuotas, default_quota


def scheduler_ports(settings_env: dict[str, str]) -> SchedulerPorts:
    settings = settings_from_env(settings_env)
    store = store_for_settings(settings)
    return SchedulerPorts(
        store=store,
        conversations=wiring.conversations(settings_env),
        quotas=StoredQuotas(store, defaults=default_quota(settings)),
        upkeep=RayMemoryUpkeep(settings_env),
        compact_schedule=settings.compact_schedule,
        reconcile_s=settings.memory_upkeep_reconcile_s,
    )


def scheduler_handle(settings_env: dict[str, str]) -> Any:
    """The ``cron-scheduler`` actor (get-or-create)."""
    tick_s = settings_from_env(settings_env).scheduler_tick_s
    ports = functools.partial(scheduler_ports, settings_env)
    return named_detached(
        CronScheduler, SCHEDULER_NAME, ports, tick_s, **placement.singleton_options()
    )
