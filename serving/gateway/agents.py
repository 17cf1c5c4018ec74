"""Agents: a persona (a library reference or inline) owned by the calling client."""

from __future__ import annotations

from fastapi import APIRouter

from core.domain import Agent, PersonaRef
from core.errors import NotFound
from core.ids import new_id, utc_now
from core.memory_schedules import reschedule
from core.projects import check_agent_projects
from core.store.library import SYSTEM
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.protocol import AgentCreate, AgentList

router = APIRouter(prefix="/v1/agents", tags=["agents"])


def _check_persona_ref(
    context: GatewayContext, body: AgentCreate, client_id: str
) -> PersonaRef | None:
    """The reference as stored: it names whose persona it means (the client's own, else the
    system's, unless ``owner`` says), so "latest" never follows another library (issue 13)."""
    if body.persona_ref is None:
        return None
    given = body.persona_ref
    if given.owner not in (None, SYSTEM, client_id):
        raise NotFound(f"persona_ref.owner: library {given.owner} not found")
    try:
        found = context.store.personas.find(
            given.id, given.version, client_id=client_id, owner=given.owner
        )
    except NotFound as exc:
        raise NotFound(f"persona_ref: {exc.message} in the library") from None
    return PersonaRef(id=given.id, version=given.version, owner=found.owner)


@router.post("", status_code=201, response_model=Agent, summary="Create an agent")
def create_agent(body: AgentCreate, context: Context, client_id: ClientId) -> Agent:
    check_agent_projects(context.store, client_id, body.project_ids)
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name=body.name,
        persona_ref=_check_persona_ref(context, body, client_id),
        persona=body.persona,
        project_ids=body.project_ids,
        created_at=utc_now(),
        memory_upkeep=body.memory_upkeep,
    )
    context.store.agents.insert(agent)
    reschedule(context.store, agent, agent.created_at)  # its memory upkeep, if it has one
    return agent


@router.get("", response_model=AgentList, summary="List your agents")
def list_agents(context: Context, client_id: ClientId) -> AgentList:
    return AgentList(items=context.store.agents.list_for_client(client_id))


@router.get("/{agent_id}", response_model=Agent, summary="Get an agent")
def get_agent(agent_id: str, context: Context, client_id: ClientId) -> Agent:
    return context.store.agents.get(agent_id, client_id=client_id)
