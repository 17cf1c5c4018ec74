"""One agent's scheduled memory upkeep, under its policy (``core.memory_upkeep``).

The cron scheduler runs this as a Ray task per due agent (``cluster/memory_upkeep.py``):

1. consolidation (``jobs.consolidate.consolidate_agent``: repair, fact merges, episode groups
   older than ``consolidation.after_hours`` folded into summaries), with the policy's strategy
   writing each summary: the built-in extractive one, a model profile's model, or a library task
   or workflow given the group (``core.memory_upkeep.strategy_input``);
2. retention: rows of episodes folded more than ``retention.archived_days`` ago are removed from
   the memories table (their archived content stays in the object store).

Each step is idempotent, so a run cut short is simply done again by the next one. The table's
compaction is its own scheduled entry (``jobs.compact.run_compact``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import InvalidInput, NotFound, RetryableError
from core.jsontypes import JsonObject
from core.memory import open_existing_memory_ops
from core.memory.records import Memory
from core.memory_policy import ConsolidationPolicy, MemoryUpkeepPolicy
from core.memory_upkeep import retention_cutoff, strategy_input, strategy_summary
from core.ports import ChatModels, Embedders, TaskContext, TaskRunner, WorkflowRuns
from core.settings import Settings
from core.store import Store
from core.workflows import RunStatus
from jobs.consolidate import (
    ConsolidateOptions,
    Summariser,
    consolidate_agent,
    extractive,
    model_summariser,
)

STRATEGY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class UpkeepPorts:
    """What an agent's upkeep uses besides the memories table: the store (the agent's library),
    models and the embedder (the built-in strategy), the executor and workflow runs (a library
    strategy)."""

    store: Store
    chat_models: ChatModels
    embedders: Embedders
    tasks: TaskRunner
    workflows: WorkflowRuns
    settings_env: dict[str, str]


def library_strategy(
    kind: str, strategy_id: str, agent_id: str, client_id: str, max_chars: int, ports: UpkeepPorts
) -> Summariser:
    """Summaries written by a library task or workflow of the agent's client (or the system's)."""

    async def summarise(episodes: Sequence[tuple[Memory, str]]) -> str:
        group = [(m.id, text, m.created_at, m.significance) for m, text in episodes]
        payload = strategy_input(agent_id, group, max_chars)
        if kind == "task":
            task = ports.store.tasks.find(strategy_id, client_id=client_id).obj
            context = TaskContext(
                client_id=client_id, agent_id=agent_id, settings_env=ports.settings_env
            )
            outcome = await ports.tasks.run(task, payload, context)
            if not outcome.success:
                raise RetryableError(
                    f"consolidation task {strategy_id} failed: {outcome.error_message()}"
                )
            result = outcome.result
        else:
            run_id = await ports.workflows.start(strategy_id, payload, client_id=client_id)
            run = await ports.workflows.wait(run_id, STRATEGY_TIMEOUT_S)
            if run.status is not RunStatus.COMPLETED:
                reason = run.error.message if run.error is not None else run.status.value
                raise RetryableError(f"consolidation workflow {strategy_id} failed: {reason}")
            result = run.output
        summary = strategy_summary(result, max_chars)
        if summary is None:
            raise InvalidInput(
                f"consolidation {kind} {strategy_id} answered no summary (a string, or an "
                "object with 'summary')"
            )
        return summary

    return summarise


def summariser_for(
    policy: MemoryUpkeepPolicy,
    consolidation: ConsolidationPolicy,
    agent_id: str,
    client_id: str,
    ports: UpkeepPorts,
) -> tuple[str, Summariser]:
    """The strategy's name and its summariser."""
    chars = consolidation.summary_chars
    strategy = policy.strategy
    if strategy is not None:
        kind, strategy_id = strategy
        summarise = library_strategy(kind, strategy_id, agent_id, client_id, chars, ports)
        return f"{kind}:{strategy_id}", summarise
    if consolidation.model_profile_id is not None:
        found = ports.store.model_profiles.find(consolidation.model_profile_id, client_id=client_id)
        name = f"model_profile:{found.obj.id}"
        return name, model_summariser(found.obj, chars, ports.chat_models)
    return "extractive", extractive(chars)


async def run_agent_upkeep(
    agent_id: str,
    client_id: str,
    policy: MemoryUpkeepPolicy,
    now: datetime,
    settings: Settings,
    ports: UpkeepPorts,
) -> JsonObject:
    """Consolidate, then apply retention to, one agent's memories; returns what was done."""
    result: JsonObject = {"job": "memory_upkeep", "agent_id": agent_id}
    try:
        ops = open_existing_memory_ops(settings, settings.memory_tuning)
    except NotFound:
        return result | {"memories": 0}  # no memories table yet: nothing to keep
    consolidation = policy.consolidation
    if consolidation is not None:
        name, summarise = summariser_for(policy, consolidation, agent_id, client_id, ports)
        options = ConsolidateOptions(
            agents=(agent_id,),
            min_age=timedelta(hours=consolidation.after_hours),
            group_size=consolidation.group_size,
            min_group=consolidation.min_group,
            summary_chars=consolidation.summary_chars,
        )
        embedder = await ports.embedders.embedder()
        report = await consolidate_agent(ops, embedder, summarise, agent_id, options, now)
        result |= {
            "strategy": name,
            "summaries": report.summaries,
            "episodes_folded": report.episodes_folded,
            "facts_merged": report.facts_merged,
            "repaired": report.repaired,
            "summary_ids": report.summary_ids,
        }
    cutoff = retention_cutoff(policy, now)
    result["archived_rows_dropped"] = 0 if cutoff is None else ops.drop_archived(agent_id, cutoff)
    return result
