"""What a Conversation actor is handed at construction: its collaborators, as ports.

``cluster/`` builds these with Ray adapters (in the actor's own process); tests build them with
in-process implementations. Tool dispatch needs only ``ToolPorts``, which the async-operations
runner also has, so both dispatch tools the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.mcp import McpTools
from core.metrics import NO_METRICS, Metrics
from core.ports import (
    AsyncOperations,
    ChatModels,
    Conversations,
    EventListeners,
    Residency,
    TaskRunner,
    TurnQuotas,
    WorkflowRuns,
)
from core.settings import Settings
from core.store import Store


@dataclass(frozen=True, slots=True)
class ToolPorts:
    """What dispatching a tool call needs: the store, settings, and the kinds of target."""

    store: Store
    settings: Settings
    settings_env: dict[str, str]  # handed on to tasks (``TaskContext.settings_env``)
    tasks: TaskRunner
    conversations: Conversations
    workflows: WorkflowRuns
    mcp: McpTools  # the client's MCP servers (``core.mcp``)
    listeners: EventListeners  # where the conversation's events are published (not the actor)


@dataclass(frozen=True, slots=True)
class ConversationPorts(ToolPorts):
    """Everything a Conversation actor works with besides its own state."""

    residency: Residency
    operations: AsyncOperations
    models: ChatModels
    quotas: TurnQuotas  # what turn quotas are checked on (``core.turn_quotas.StoredQuotas``)
    metrics: Metrics = NO_METRICS


ConversationPortsFactory = Callable[[], ConversationPorts]
"""Builds the ports in the actor's own process (a module-level function travels by reference)."""
