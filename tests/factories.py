"""Builders for test data in a real store: clients, personas, scripted profiles, agents, tools."""

from __future__ import annotations

from typing import Any

from core.conversations import create_conversation
from core.domain import (
    Agent,
    Client,
    Constraints,
    Conversation,
    ModelProfile,
    Persona,
    PersonaRef,
    ScriptStep,
    TaskAction,
    TaskDef,
    Tool,
)
from core.ids import new_id, utc_now
from core.store import Store


def make_client(store: Store, name: str = "test") -> tuple[str, str]:
    """A new client and API key; returns ``(client_id, api_key)``."""
    client = Client(id=new_id("client"), name=name, created_at=utc_now())
    store.clients.insert(client)
    key = f"wk_{new_id()}"
    store.clients.add_api_key(client.id, key, utc_now())
    return client.id, key


def scripted_profile(store: Store, steps: list[dict[str, Any]] | None = None) -> ModelProfile:
    """A model profile whose model replays ``steps`` (see ``core.domain.ScriptStep``)."""
    profile = ModelProfile(
        id=f"scripted-{new_id().lower()}",
        provider="scripted",
        model="echo" if steps is None else "script",
        script=[ScriptStep.model_validate(s) for s in steps] if steps is not None else None,
    )
    return store.model_profiles.put(profile, utc_now())


def task_tool(
    store: Store,
    name: str,
    actions: list[dict[str, Any]],
    schema: dict[str, Any] | None = None,
    **tool_fields: Any,
) -> Tool:
    task = store.tasks.put(
        TaskDef(
            id=f"task-{name}-{new_id().lower()}",
            actions=[TaskAction.model_validate(a) for a in actions],
        ),
        utc_now(),
    )
    tool = Tool(
        id=f"tool-{name}-{new_id().lower()}",
        name=name,
        description=f"test tool {name}",
        input_schema=schema or {"type": "object"},
        target_type="task",
        target_id=task.id,
        **tool_fields,
    )
    return store.tools.put(tool, utc_now())


def agent_tool(
    store: Store, name: str, agent_id: str, description: str, **tool_fields: Any
) -> Tool:
    """A tool that asks agent ``agent_id`` with one string ``input``; ``tool_fields`` by their
    JSON names (``invocation_mode``, ``async``, ``retry``)."""
    tool = Tool.model_validate(
        {
            "id": f"tool-{name}-{new_id().lower()}",
            "name": name,
            "description": description,
            "target_type": "agent",
            "target_id": agent_id,
            "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}},
            **tool_fields,
        }
    )
    return store.tools.put(tool, utc_now())


def make_agent(
    store: Store,
    client_id: str,
    profile: ModelProfile,
    tools: list[Tool] | None = None,
    **persona_fields: Any,
) -> Agent:
    constraints = persona_fields.pop("constraints", None) or Constraints()
    project_ids = persona_fields.pop("project_ids", None) or []
    persona = store.personas.put(
        Persona(
            id=f"persona-{new_id().lower()}",
            system_prompt=persona_fields.pop("system_prompt", "You are a test agent."),
            model_profile_id=profile.id,
            tool_ids=[t.id for t in tools or []],
            constraints=constraints,
            **persona_fields,
        ),
        utc_now(),
    )
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name="test agent",
        persona_ref=PersonaRef(id=persona.id),
        project_ids=project_ids,
        created_at=utc_now(),
    )
    return store.agents.insert(agent)


def make_conversation(
    store: Store, client_id: str, agent: Agent, conversation_id: str | None = None
) -> Conversation:
    return create_conversation(
        store, client_id=client_id, agent_id=agent.id, conversation_id=conversation_id
    )
