"""What a WorkflowCoordinator is handed at construction: its collaborators, as ports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.metrics import NO_METRICS, Metrics
from core.ports import Conversations, Lifecycle, TaskRunner, WorkflowRuns
from core.settings import Settings
from core.store import Store


@dataclass(frozen=True, slots=True)
class CoordinatorPorts:
    store: Store
    settings: Settings
    settings_env: dict[str, str]  # handed on to tasks (``TaskContext.settings_env``)
    tasks: TaskRunner
    conversations: Conversations  # agent nodes
    workflows: WorkflowRuns  # subworkflow nodes
    lifecycle: Lifecycle  # the coordinator leaves when its run has ended
    metrics: Metrics = NO_METRICS  # runs ended, by workflow and outcome


CoordinatorPortsFactory = Callable[[], CoordinatorPorts]
"""Builds the ports in the coordinator's own process (travels by reference)."""
