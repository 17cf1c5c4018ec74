"""Async tools beyond tasks, end to end on the session's Ray (the gateway over HTTP, conversation
actors, the ``async-operations`` runner, workflow coordinators, scripted models): the shipped
``research`` workflow tool run from a conversation with its result delivered into the turn, an
async delegation answered later in the same turn, pending work of another turn shown to the
model and to the context hook, and an async ``loop_in`` whose agent joins at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.domain import Tool
from core.ids import new_id, utc_now
from core.library_files import apply_library
from tests.conftest import Cluster, wait_for
from tests.factories import agent_tool, make_agent, make_client, scripted_profile, task_tool
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(420)

LIBRARY = Path(__file__).resolve().parents[2] / "library"


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def tenant(gateway_url: str, ray_cluster: Cluster) -> Iterator[tuple[str, httpx.Client]]:
    client_id, key = make_client(ray_cluster.store, "async")
    with http_client(gateway_url, key) as api:
        yield client_id, api


def rules(*pairs: tuple[str, Any]) -> list[dict[str, Any]]:
    """A rule-style script: the first step whose ``match`` is in the last message answers (a
    string replies, a dict calls that tool)."""
    return [
        {"match": match, "reply": then}
        if isinstance(then, str)
        else {"match": match, "tool_calls": [then]}
        for match, then in pairs
    ]


def start(api: httpx.Client, agent_id: str, content: str) -> tuple[str, str]:
    conv = str(api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"])
    return conv, say(api, conv, content)


def say(api: httpx.Client, conv: str, content: str) -> str:
    ack = api.post(f"/v1/conversations/{conv}/messages", json={"content": content})
    assert ack.status_code == 202, ack.text
    return str(ack.json()["turn_id"])


def turn(api: httpx.Client, conv: str, turn_id: str) -> dict[str, Any]:
    return dict(api.get(f"/v1/conversations/{conv}/turns/{turn_id}").json())


def completed(api: httpx.Client, conv: str, turn_id: str, timeout: float = 180) -> dict[str, Any]:
    found = wait_for(
        lambda: (t := turn(api, conv, turn_id))["status"] != "active" and t, timeout, 0.3
    )
    assert found["status"] == "completed", found
    return found


def agent_says(api: httpx.Client, conv: str, turn_id: str) -> list[str]:
    items = api.get(f"/v1/conversations/{conv}/messages", params={"limit": 1000}).json()["items"]
    return [m["content"] for m in items if m["turn_id"] == turn_id and m["role"] == "agent"]


def test_the_research_workflow_tool_answers_later_in_its_turn(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client]
) -> None:
    client_id, api = tenant
    store = ray_cluster.store
    apply_library(store, LIBRARY, utc_now())
    research: Tool = store.tools.get("research")
    assert research.is_async and research.target_type == "workflow"
    # The same model answers the conversation and the workflow's own model calls (the run works
    # for the calling agent: its tasks use the agent's profile).
    profile = scripted_profile(
        store,
        rules(
            ("[background result]", "Research finished: {{last_user}}"),
            ("Findings:", "Owls are quiet hunters."),
            ("Question:", "An answer."),
            ("research owls", {"name": "research", "arguments": {"topic": "owls", "questions": 2}}),
            ("", "Researching now."),
        ),
    )
    agent = make_agent(store, client_id, profile, [research])
    conv, turn_id = start(api, agent.id, "please research owls")
    done = completed(api, conv, turn_id)
    said = agent_says(api, conv, turn_id)
    assert said[0] == "Researching now."  # the acknowledgement, before the result
    assert said[-1].startswith("Research finished: [background result] research")
    assert "Owls are quiet hunters." in said[-1]
    [move] = [m for m in done["moves"] if m["tool_call"]]
    assert move["tool_result"]["result"]["status"] == "dispatched"
    # The run worked for this turn and agent.
    runs = api.get("/v1/workflow-runs", params={"limit": 200}).json()["items"]
    [run] = [r for r in runs if (r.get("context") or {}).get("turn_id") == turn_id]
    assert run["workflow_id"] == "research_fanout" and run["status"] == "completed"
    assert run["context"]["agent_id"] == agent.id
    filtered = api.get(f"/v1/conversations/{conv}/turns", params={"workflow_run": run["id"]})
    assert [t["id"] for t in filtered.json()["items"]] == [turn_id]


def test_an_async_delegation_is_answered_later_in_the_same_turn(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client]
) -> None:
    client_id, api = tenant
    store = ray_cluster.store
    expert = make_agent(store, client_id, scripted_profile(store, [{"reply": "It is four."}]))
    ask = agent_tool(
        store,
        "ask_expert",
        expert.id,
        "Ask the expert; the answer comes later",
        invocation_mode="delegate",
        **{"async": True},
    )
    profile = scripted_profile(
        store,
        rules(
            ("[background result]", "The expert says: {{last_user}}"),
            ("ask the expert", {"name": "ask_expert", "arguments": {"input": "what is 2+2?"}}),
            ("", "I asked the expert, I'll let you know."),
        ),
    )
    agent = make_agent(store, client_id, profile, [ask])
    conv, turn_id = start(api, agent.id, "please ask the expert")
    completed(api, conv, turn_id)
    said = agent_says(api, conv, turn_id)
    assert said[0] == "I asked the expert, I'll let you know."
    assert said[-1].startswith("The expert says:") and "It is four." in said[-1]
    children = api.get(f"/v1/conversations/{conv}/children").json()["items"]
    assert [c["agent_id"] for c in children] == [expert.id]


def test_pending_work_of_another_turn_is_shown_to_the_model_and_the_hook(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client]
) -> None:
    client_id, api = tenant
    store = ray_cluster.store
    slow = task_tool(
        store,
        "slow_report",
        [{"kind": "python", "params": {"callable": "library.workflows.steps:pause"}}],
        schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
        **{"async": True},
    )
    hook = task_tool(
        store,
        "pending_hook",
        [{"kind": "python", "params": {"callable": "tests.callables:pending_as_context"}}],
    )
    profile = scripted_profile(
        store,
        rules(
            ("[background result]", "The report is ready."),
            ("start the report", {"name": "slow_report", "arguments": {"seconds": 20}}),
            ("what is pending", "PENDING: {{context}}"),
            ("", "On it."),
        ),
    )
    agent = make_agent(store, client_id, profile, [slow], context_assembly_task_id=hook.target_id)
    conv, first = start(api, agent.id, "please start the report")
    wait_for(lambda: agent_says(api, conv, first) == ["On it."], 90, 0.3)
    assert turn(api, conv, first)["status"] == "active"  # its operation is still out
    second = say(api, conv, "what is pending?")
    completed(api, conv, second)
    [reply] = agent_says(api, conv, second)
    assert f"hook saw pending: slow_report@{first}" in reply  # the hook was told
    assert "Background operations still running:" in reply  # and so was the model
    assert "slow_report (operation op_" in reply and f"started in turn {first}" in reply
    completed(api, conv, first)
    assert agent_says(api, conv, first)[-1] == "The report is ready."


def test_an_async_loop_in_joins_at_once_and_answers_later(
    ray_cluster: Cluster, tenant: tuple[str, httpx.Client]
) -> None:
    client_id, api = tenant
    store = ray_cluster.store
    reviewer = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "Looks good to me.", "delay_s": 3}])
    )
    invite = store.tools.put(
        Tool.model_validate(
            {
                "id": f"invite-{new_id().lower()}",
                "name": "invite_reviewer",
                "description": "Bring the reviewer into this conversation",
                "target_type": "agent",
                "target_id": reviewer.id,
                "invocation_mode": "loop_in",
                "async": True,
                "input_schema": {"type": "object", "properties": {"input": {"type": "string"}}},
            }
        ),
        utc_now(),
    )
    profile = scripted_profile(
        store,
        rules(
            ("[background result]", "The reviewer answered: {{last_user}}"),
            ("bring in", {"name": "invite_reviewer", "arguments": {"input": "please review"}}),
            ("", "The reviewer is here."),
        ),
    )
    agent = make_agent(store, client_id, profile, [invite])
    conv, turn_id = start(api, agent.id, "bring in the reviewer")
    done = completed(api, conv, turn_id)
    [move] = [m for m in done["moves"] if m["tool_call"]]
    ack = move["tool_result"]["result"]
    # The model heard at once that the reviewer joined: the ack itself says so.
    assert ack["status"] == "dispatched" and ack["joined"] is True
    assert ack["agent_id"] == reviewer.id and f"@{reviewer.id}" in ack["note"]
    events = api.get(f"/v1/conversations/{conv}/events", params={"limit": 1000}).json()["items"]
    joined = [e["seq"] for e in events if e["type"] == "participant_joined"]
    acked = [
        e["seq"]
        for e in events
        if e["type"] == "message" and e["message"]["content"] == "The reviewer is here."
    ]
    assert joined and acked and joined[0] < acked[0]  # joined before the model answered
    said = agent_says(api, conv, turn_id)
    assert said[-1].startswith("The reviewer answered:") and "Looks good to me." in said[-1]
    participants = api.get(f"/v1/conversations/{conv}").json()["participants"]
    assert {"type": "agent", "id": reviewer.id} in participants
