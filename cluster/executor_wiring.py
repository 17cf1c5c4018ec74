"""What executor actions use, built once per worker process from its ``WONDER_*`` settings.

Apart from ``cluster.wiring`` because it pulls in the memory stack (LanceDB, pyarrow) and every
action: a task's worker imports it when it runs its first task (``cluster.by_name.FunctionRef``
names it), the processes that only submit tasks (conversation actors, coordinators) never do.
"""

from __future__ import annotations

import functools

from actors.actions.registry import ActionServices
from cluster.memory_access import ProcessMemory, ServedEmbedders
from cluster.metrics import ray_metrics
from cluster.models import ServedChatModels
from cluster.wiring import EnvKey, key_of, workspaces
from core.recording_setup import install_recording
from core.secret_vault import SecretVault
from core.settings import Settings, settings_from_env
from core.store import store_for_settings


@functools.lru_cache(maxsize=8)
def _executor_services(key: EnvKey) -> ActionServices:
    env = dict(key)
    settings: Settings = settings_from_env(env)
    store = store_for_settings(settings)
    install_recording(store, settings, "executor", ray_metrics())
    return ActionServices(
        store=store,
        settings=settings,
        chat_models=ServedChatModels(settings, SecretVault(store, settings)),
        memory=ProcessMemory(settings, ServedEmbedders(env)),
        workspaces=workspaces(env),
    )


def executor_services(settings_env: dict[str, str]) -> ActionServices:
    """What executor actions use (built once per worker process)."""
    return _executor_services(key_of(settings_env))
