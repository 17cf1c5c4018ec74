"""``consolidate``: fold old episodes into summaries, settle duplicate facts.

Per agent (one Ray task each, ``--parallel`` at a time):

1. finish what an interrupted run left: a summary whose source episodes were never marked;
2. facts/decisions sharing a subject (two writers raced past the write-time check): the newest
   stays, the others point ``consolidated_into`` at it (a contradiction ends as one fact);
3. unconsolidated episodes older than ``--min-age-hours``, in chronological groups of
   ``--group-size``: a summary (``type: summary``, ``metadata.sources``, significance of the most
   significant episode) is written with an id derived from its sources; each episode's content is
   archived to the object store at ``<agent_id>/<memory_id>`` and the episode row keeps only that
   reference and ``consolidated_into``. Marking a group is one commit.

Every step is idempotent, so the job can be rerun at any time, also while conversations write.
The summary text comes from a model profile (``--model-profile``) or, without one, from a
deterministic extractive summariser. The models and the embedder are ports
(``ConsolidationPorts``), built in each worker by the factory the entry point (``python -m
cluster.jobs consolidate``) passes in.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from core.domain import ModelProfile
from core.ids import utc_now
from core.llm.protocol import ChatRequest, complete
from core.memory import MemoryFilter, MemoryOps, open_existing_memory_ops
from core.memory.embedding import Embedder
from core.memory.objects import object_key
from core.memory.planning import (
    UPDATABLE_TYPES,
    extractive_summary,
    plan_fact_merges,
    plan_groups,
    unfinished_groups,
)
from core.memory.records import Memory, MemoryType
from core.ports import ChatModels, Embedders
from core.settings import settings_from_env
from core.store import open_store
from jobs.runtime import Progress, connect_ray, job_settings, print_result

Summariser = Callable[[Sequence[tuple[Memory, str]]], Awaitable[str]]

SUMMARY_PROMPT = (
    "Summarise these episodes from an assistant's memory in at most five sentences. Keep names, "
    "decisions, dates and numbers; leave out small talk."
)


@dataclass(frozen=True)
class ConsolidationPorts:
    """What consolidation uses besides the memory stores: models for summaries, the embedder."""

    chat_models: ChatModels
    embedders: Embedders


PortsFactory = Callable[[dict[str, str]], ConsolidationPorts]
"""Builds the ports in the process that consolidates (a module-level function, by reference)."""


@dataclass(frozen=True)
class ConsolidateOptions:
    agents: tuple[str, ...] = ()
    min_age: timedelta = timedelta(hours=24)
    group_size: int = 20
    min_group: int = 2
    model_profile: str | None = None
    parallel: int = 2
    summary_chars: int = 2000


@dataclass
class AgentReport:
    agent_id: str
    summaries: int = 0
    episodes_folded: int = 0
    facts_merged: int = 0
    repaired: int = 0
    summary_ids: list[str] = field(default_factory=list)


def archive_and_mark(
    ops: MemoryOps, episodes: Sequence[tuple[Memory, str]], into: str, now: datetime
) -> int:
    """Put each episode's content in the object store, then mark all of them in one commit."""
    refs: list[str | None] = []
    for memory, content in episodes:
        key = memory.content_ref or object_key(memory.agent_id, memory.id)
        if memory.content_ref is None:
            ops.objects.put(key, content.encode())
        refs.append(key)
    return ops.mark_consolidated([m.id for m, _ in episodes], into, refs, now)


async def fold_group(
    ops: MemoryOps,
    embedder: Embedder,
    summarise: Summariser,
    summary_id: str,
    episodes: Sequence[Memory],
    now: datetime,
) -> int:
    """Write the summary of ``episodes`` (if absent), archive and mark them; returns marked."""
    contents = [(e, ops.content(e)) for e in episodes]
    text = await summarise(contents)
    vector = (await embedder.embed([text]))[0]
    summary = Memory(
        id=summary_id,
        agent_id=episodes[0].agent_id,
        type=MemoryType.SUMMARY.value,
        significance=max(e.significance for e in episodes),
        metadata={
            "consolidation": True,
            "sources": [e.id for e in episodes],
            "from": min(e.created_at for e in episodes).isoformat(),
            "to": max(e.created_at for e in episodes).isoformat(),
        },
        embedding_model=embedder.model_name,
        created_at=max(e.created_at for e in episodes),
        updated_at=now,
    )
    ops.insert_if_absent([(ops.externalise(summary, text), vector)])
    return archive_and_mark(ops, contents, summary_id, now)


async def consolidate_agent(
    ops: MemoryOps,
    embedder: Embedder,
    summarise: Summariser,
    agent_id: str,
    options: ConsolidateOptions,
    now: datetime,
) -> AgentReport:
    report = AgentReport(agent_id)
    episode_filter = MemoryFilter(agent_id, types=(MemoryType.EPISODE.value,))
    episodes = ops.list_all(episode_filter)
    summaries = ops.list_all(
        MemoryFilter(agent_id, types=(MemoryType.SUMMARY.value,), include_consolidated=True)
    )
    by_id = {e.id: e for e in episodes}
    for summary_id, pending in unfinished_groups(summaries, set(by_id)):
        contents = [(by_id[i], ops.content(by_id[i])) for i in pending]
        report.repaired += archive_and_mark(ops, contents, summary_id, now)
    if report.repaired:
        episodes = ops.list_all(episode_filter)

    facts = ops.list_all(MemoryFilter(agent_id, types=tuple(sorted(UPDATABLE_TYPES))))
    for survivor, folded in plan_fact_merges(facts):
        report.facts_merged += ops.mark_consolidated(folded, survivor, [None] * len(folded), now)

    groups = plan_groups(episodes, now, options.min_age, options.group_size, options.min_group)
    for group in groups:
        report.episodes_folded += await fold_group(
            ops, embedder, summarise, group.summary_id, group.episodes, now
        )
        report.summaries += 1
        report.summary_ids.append(group.summary_id)
    return report


def extractive(max_chars: int) -> Summariser:
    async def summarise(episodes: Sequence[tuple[Memory, str]]) -> str:
        return extractive_summary(episodes, max_chars)

    return summarise


def with_model(
    profile_id: str, settings_env: dict[str, str], max_chars: int, models: ChatModels
) -> Summariser:
    """Summaries written by a model profile."""
    profile = open_store(settings_env).model_profiles.get(profile_id)
    return model_summariser(profile, max_chars, models)


def model_summariser(profile: ModelProfile, max_chars: int, models: ChatModels) -> Summariser:
    """Summaries written by ``profile``'s model (an extractive one when it answers nothing)."""

    async def summarise(episodes: Sequence[tuple[Memory, str]]) -> str:
        listing = "\n".join(f"- ({m.created_at.date()}) {text}" for m, text in episodes)
        request = ChatRequest(
            messages=[
                {"role": "system", "content": SUMMARY_PROMPT},
                {"role": "user", "content": listing[-12_000:]},
            ],
            model=profile.model,
            temperature=0.0,
            max_tokens=min(profile.max_tokens, 400),
            timeout_s=profile.timeout_s,
        )
        text = (await complete(models.for_profile(profile), request)).strip()
        return text[:max_chars] or extractive_summary(episodes, max_chars)

    return summarise


async def consolidate_one(
    agent_id: str,
    options: ConsolidateOptions,
    settings_env: dict[str, str],
    now: datetime,
    ports: PortsFactory,
) -> AgentReport:
    """One agent in this process: open the stores, pick the summariser and embedder, run."""
    wired = ports(settings_env)
    settings = settings_from_env(settings_env)
    ops = open_existing_memory_ops(settings, settings.memory_tuning)
    embedder = await wired.embedders.embedder()
    summarise = (
        with_model(options.model_profile, settings_env, options.summary_chars, wired.chat_models)
        if options.model_profile
        else extractive(options.summary_chars)
    )
    return await consolidate_agent(ops, embedder, summarise, agent_id, options, now)


def _remote_consolidate(
    agent_id: str,
    options: ConsolidateOptions,
    settings_env: dict[str, str],
    now: datetime,
    ports: PortsFactory,
) -> AgentReport:
    return asyncio.run(consolidate_one(agent_id, options, settings_env, now, ports))


def _in_ray_tasks(
    agents: list[str],
    options: ConsolidateOptions,
    env: dict[str, str],
    now: datetime,
    ports: PortsFactory,
) -> Iterator[AgentReport]:
    """One Ray task per agent, ``options.parallel`` at a time, reports as they finish."""
    import ray

    task = ray.remote(num_cpus=0.5, max_retries=2)(_remote_consolidate)
    pending: list[Any] = []
    queue = list(agents)
    while queue or pending:
        while queue and len(pending) < options.parallel:
            pending.append(task.remote(queue.pop(0), options, env, now, ports))
        ready, pending = ray.wait(pending, num_returns=1)
        yield ray.get(ready[0])


def _in_process(
    agents: list[str],
    options: ConsolidateOptions,
    env: dict[str, str],
    now: datetime,
    ports: PortsFactory,
) -> Iterator[AgentReport]:
    for agent_id in agents:
        yield asyncio.run(consolidate_one(agent_id, options, env, now, ports))


def run_consolidate(options: ConsolidateOptions, ports: PortsFactory) -> dict[str, Any]:
    """Consolidate every agent (or ``options.agents``); returns the job's totals."""
    import ray

    say = Progress("consolidate")
    settings = job_settings()
    env = settings.env()
    now = utc_now()
    ops = open_existing_memory_ops(settings, settings.memory_tuning)
    agents = list(options.agents) or ops.agent_ids(
        types=(MemoryType.EPISODE.value, *sorted(UPDATABLE_TYPES))
    )
    say.say(
        f"{len(agents)} agents; episodes older than {options.min_age} fold in groups of "
        f"{options.group_size}"
    )
    # Fan out only when there is something to fan out: a task per agent costs a worker start.
    fan_out = ray.is_initialized() and options.parallel > 1 and len(agents) > 1
    runner = _in_ray_tasks if fan_out else _in_process
    reports: list[AgentReport] = []
    for report in runner(agents, options, env, now, ports):
        reports.append(report)
        say.say(
            f"agent {report.agent_id}: {report.summaries} summaries from "
            f"{report.episodes_folded} episodes, {report.facts_merged} facts merged, "
            f"{report.repaired} repaired ({len(reports)}/{len(agents)} agents)"
        )
    return {
        "job": "consolidate",
        "agents": len(reports),
        "summaries": sum(r.summaries for r in reports),
        "episodes_folded": sum(r.episodes_folded for r in reports),
        "facts_merged": sum(r.facts_merged for r in reports),
        "repaired": sum(r.repaired for r in reports),
        "per_agent": [asdict(r) for r in reports],
        "seconds": round(say.elapsed(), 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options (``wonder job consolidate --help`` shows them)."""
    parser.add_argument(
        "--agent", action="append", default=[], help="only this agent (repeat for several)"
    )
    parser.add_argument(
        "--min-age-hours",
        type=float,
        default=24.0,
        help="consolidate episodes older than this (default %(default)s)",
    )
    parser.add_argument(
        "--group-size", type=int, default=20, help="episodes per summary (default %(default)s)"
    )
    parser.add_argument(
        "--min-group",
        type=int,
        default=2,
        help="the smallest group summarised; fewer wait for a later run (default %(default)s)",
    )
    parser.add_argument(
        "--model-profile",
        help="write summaries with this model profile (default: an extractive summary)",
    )
    parser.add_argument(
        "--parallel", type=int, default=2, help="agents consolidated at once (default %(default)s)"
    )


def parse_args(argv: list[str] | None) -> ConsolidateOptions:
    parser = argparse.ArgumentParser(prog="python -m cluster.jobs consolidate", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return ConsolidateOptions(
        agents=tuple(args.agent),
        min_age=timedelta(hours=args.min_age_hours),
        group_size=max(1, args.group_size),
        min_group=max(1, args.min_group),
        model_profile=args.model_profile,
        parallel=max(1, args.parallel),
    )


def main(argv: list[str] | None, ports: PortsFactory) -> int:
    options = parse_args(argv)
    connected = connect_ray()
    try:
        print_result(run_consolidate(options, ports))
    finally:
        if connected:
            import ray

            ray.shutdown()
    return 0
