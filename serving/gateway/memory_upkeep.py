"""An agent's scheduled memory upkeep (``core.memory_upkeep``): see it, set the agent's own
policy (over its persona's), and run it now.

``/v1/agents/{agent_id}/memory-upkeep`` — another client's agent is a 404, like a missing one.
Changing the policy reschedules the agent at once (the scheduler would within a minute).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import Agent
from core.ids import utc_now
from core.memory_policy import MemoryUpkeepPolicy
from core.memory_schedules import agent_policy, reschedule, run_now
from core.memory_upkeep import UpkeepRun, agent_key
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1/agents/{agent_id}/memory-upkeep", tags=["memories"])


class MemoryUpkeepView(WireModel):
    """The policy in force (the agent's own, else its persona's) and its schedule."""

    agent_id: str
    source: Literal["agent", "persona"] | None = Field(
        description="Whose policy is in force; None: no upkeep"
    )
    policy: MemoryUpkeepPolicy | None
    agent_policy: MemoryUpkeepPolicy | None = Field(description="The agent's own, if set")
    next_due: str | None = None
    runs: int = 0
    last_run: UpkeepRun | None = None


def _view(context: GatewayContext, agent: Agent) -> MemoryUpkeepView:
    policy = agent_policy(context.store, agent)
    source: Literal["agent", "persona"] | None = None
    if policy is not None:
        source = "agent" if agent.memory_upkeep is not None else "persona"
    entry = context.store.memory_upkeep.find(agent_key(agent.id))
    return MemoryUpkeepView(
        agent_id=agent.id,
        source=source,
        policy=policy,
        agent_policy=agent.memory_upkeep,
        next_due=entry.next_due.isoformat() if entry is not None else None,
        runs=entry.runs if entry is not None else 0,
        last_run=entry.last_run if entry is not None else None,
    )


def _owned(context: GatewayContext, client_id: str, agent_id: str) -> Agent:
    return context.store.agents.get(agent_id, client_id=client_id)


@router.get("", response_model=MemoryUpkeepView, summary="An agent's memory upkeep")
async def get_memory_upkeep(
    agent_id: str, context: Context, client_id: ClientId
) -> MemoryUpkeepView:
    def read() -> MemoryUpkeepView:
        return _view(context, _owned(context, client_id, agent_id))

    return await run_in_threadpool(read)


@router.put("", response_model=MemoryUpkeepView, summary="Set the agent's own upkeep policy")
async def put_memory_upkeep(
    agent_id: str, body: MemoryUpkeepPolicy, context: Context, client_id: ClientId, audit: Audit
) -> MemoryUpkeepView:
    """The agent's own policy, over its persona's (``enabled: false`` turns the persona's off
    for this agent)."""

    def write() -> MemoryUpkeepView:
        agent = _owned(context, client_id, agent_id)
        agent = context.store.agents.save(agent.model_copy(update={"memory_upkeep": body}))
        reschedule(context.store, agent, utc_now())
        details = {"schedule": body.schedule, "enabled": body.enabled}
        audit.record("agent.memory_upkeep.set", f"agent:{agent_id}", details)
        return _view(context, agent)

    return await run_in_threadpool(write)


@router.delete("", response_model=MemoryUpkeepView, summary="Drop the agent's own policy")
async def delete_memory_upkeep(
    agent_id: str, context: Context, client_id: ClientId, audit: Audit
) -> MemoryUpkeepView:
    """The persona's policy (if any) is in force again."""

    def write() -> MemoryUpkeepView:
        agent = _owned(context, client_id, agent_id)
        agent = context.store.agents.save(agent.model_copy(update={"memory_upkeep": None}))
        reschedule(context.store, agent, utc_now())
        audit.record("agent.memory_upkeep.unset", f"agent:{agent_id}", {})
        return _view(context, agent)

    return await run_in_threadpool(write)


@router.post("/run", status_code=202, response_model=MemoryUpkeepView, summary="Run the upkeep now")
async def run_memory_upkeep(
    agent_id: str, context: Context, client_id: ClientId, audit: Audit
) -> MemoryUpkeepView:
    """Due at once: the scheduler starts it at its next tick (409 without a policy). Its
    outcome is ``last_run`` once it has ended."""

    def request() -> MemoryUpkeepView:
        agent = _owned(context, client_id, agent_id)
        run_now(context.store, agent, utc_now())
        audit.record("agent.memory_upkeep.run", f"agent:{agent_id}", {})
        return _view(context, agent)

    return await run_in_threadpool(request)
