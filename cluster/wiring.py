"""Wiring: the ports every Wonder process is handed, built from its ``WONDER_*`` settings.

Each factory here is a module-level function, so it travels to Ray actors and tasks by reference
and runs in their own process (``functools.partial(conversation_ports, env)``); each process
builds its adapters once per distinct settings. Nothing below ``cluster/`` imports this module:
actors, the gateway and jobs get what it builds at construction.
"""

from __future__ import annotations

import functools
from typing import Any

import ray

from actors.conversation.intake import Intake
from actors.conversation.ports import ConversationPorts, ToolPorts
from actors.workflow_coordinator.ports import CoordinatorPorts
from actors.workflow_coordinator.runs import RunLimits, WorkflowRunService
from cluster import placement
from cluster.async_operations import RayAsyncOperations, runner_handle
from cluster.by_name import FunctionRef
from cluster.conversation_events import RayEventPublisher, event_listener
from cluster.conversations import RayConversations, directory_handle
from cluster.executor_dispatch import DispatchedTaskRunner
from cluster.executor_pool import PooledTaskRunner
from cluster.mcp import RayMcpTools
from cluster.metrics import ray_metrics
from cluster.models import ServedChatModels
from cluster.workflows import RayCoordinators
from cluster.workspaces import RayWorkspaces
from core.recording_setup import install_recording
from core.secret_vault import SecretVault
from core.settings import settings_from_env, wonder_env
from core.store import store_for_settings
from core.turn_quotas import StoredQuotas, default_quota

EnvKey = tuple[tuple[str, str], ...]


def key_of(settings_env: dict[str, str]) -> EnvKey:
    """Processes are told apart by their ``WONDER_*`` settings only (Ray's own variables may
    differ between a driver and its workers)."""
    return tuple(sorted(wonder_env(settings_env).items()))


class ActorLifecycle:
    """``Lifecycle`` of the Ray actor this process runs."""

    def exit(self) -> None:
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()


# --------------------------------------------------------------------------- shared pieces


@functools.lru_cache(maxsize=4)
def event_publisher(token_linger_ms: float) -> RayEventPublisher:
    """This process's way to publish conversation events (to the events hub)."""
    return RayEventPublisher(token_linger_s=token_linger_ms / 1000)


@functools.lru_cache(maxsize=8)
def _conversations(key: EnvKey) -> RayConversations:
    env = dict(key)
    settings = settings_from_env(env)
    store = store_for_settings(settings)
    return RayConversations(
        lambda: directory_handle(env, settings.max_resident_conversations, conversation_ports),
        Intake(store, event_publisher(settings.token_linger_ms)),
        lambda: event_listener(store, str(key)).feed,
    )


@functools.lru_cache(maxsize=8)
def _workflows(key: EnvKey) -> WorkflowRunService:
    env = dict(key)
    settings = settings_from_env(env)
    coordinators = RayCoordinators(env, functools.partial(coordinator_ports, env))
    store = store_for_settings(settings)
    return WorkflowRunService(store, coordinators, RunLimits.of(store, settings))


def conversations(settings_env: dict[str, str]) -> RayConversations:
    """This process's way to the conversation actors."""
    return _conversations(key_of(settings_env))


def workflows(settings_env: dict[str, str]) -> WorkflowRunService:
    """This process's way to start and watch workflow runs."""
    return _workflows(key_of(settings_env))


# What executor actions use, built where a task runs (``cluster.executor_wiring``): named, not
# imported, so the processes that only submit tasks (conversation actors) import none of it.
EXECUTOR_SERVICES = FunctionRef("cluster.executor_wiring", "executor_services")


def task_runner(settings_env: dict[str, str]) -> PooledTaskRunner:
    """Hooks on the executor pool (``cluster.executor_pool``); every other task a Ray task
    submitted by the node's dispatcher (``cluster.executor_dispatch``), so callers share warm
    workers."""
    settings = settings_from_env(settings_env)
    overflow = DispatchedTaskRunner(EXECUTOR_SERVICES, placement.executor_options(settings))
    return PooledTaskRunner(settings, EXECUTOR_SERVICES, overflow)


# --------------------------------------------------------------------------- per kind of process


@functools.lru_cache(maxsize=8)
def _tool_ports(key: EnvKey) -> ToolPorts:
    env = dict(key)
    settings = settings_from_env(env)
    return ToolPorts(
        store=store_for_settings(settings),
        settings=settings,
        settings_env=env,
        tasks=task_runner(env),
        conversations=conversations(env),
        workflows=workflows(env),
        mcp=RayMcpTools(env),
        listeners=event_publisher(settings.token_linger_ms),
    )


def tool_ports(settings_env: dict[str, str]) -> ToolPorts:
    """What the async-operations runner dispatches tools with."""
    return _tool_ports(key_of(settings_env))


def conversation_ports(settings_env: dict[str, str]) -> ConversationPorts:
    """What a Conversation actor works with (built in its own process)."""
    tools = tool_ports(settings_env)
    install_recording(tools.store, tools.settings, "conversation", ray_metrics())
    conversations_port = conversations(settings_env)
    runner_ports = functools.partial(tool_ports, settings_env)
    return ConversationPorts(
        store=tools.store,
        settings=tools.settings,
        settings_env=tools.settings_env,
        tasks=tools.tasks,
        conversations=conversations_port,
        workflows=tools.workflows,
        mcp=tools.mcp,
        listeners=tools.listeners,
        residency=conversations_port,
        operations=RayAsyncOperations(lambda: runner_handle(settings_env, runner_ports)),
        models=ServedChatModels(tools.settings, SecretVault(tools.store, tools.settings)),
        quotas=StoredQuotas(tools.store, defaults=default_quota(tools.settings)),
        metrics=ray_metrics(),
    )


def coordinator_ports(settings_env: dict[str, str]) -> CoordinatorPorts:
    """What a WorkflowCoordinator works with (built in its own process)."""
    tools = tool_ports(settings_env)
    install_recording(tools.store, tools.settings, "workflow", ray_metrics())
    return CoordinatorPorts(
        store=tools.store,
        settings=tools.settings,
        settings_env=tools.settings_env,
        tasks=tools.tasks,
        conversations=tools.conversations,
        workflows=tools.workflows,
        lifecycle=ActorLifecycle(),
        metrics=ray_metrics(),
    )


@functools.lru_cache(maxsize=8)
def _workspaces(key: EnvKey) -> RayWorkspaces:
    settings = settings_from_env(dict(key))
    return RayWorkspaces(store_for_settings(settings), settings)


def workspaces(settings_env: dict[str, str]) -> RayWorkspaces:
    """This process's way to the workspace actors."""
    return _workspaces(key_of(settings_env))


def operations_runner(settings_env: dict[str, str]) -> Any:
    """The ``async-operations`` actor's handle (get-or-create)."""
    return runner_handle(settings_env, functools.partial(tool_ports, settings_env))
