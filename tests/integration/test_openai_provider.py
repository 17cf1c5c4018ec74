"""The ``openai`` provider's failure path on the real cluster: a model endpoint nobody listens
on is retried with the LLM policy's backoff, each retry announced, then the turn fails saying it
may be retried. (Its success path runs against the project's own ``/llm/v1`` endpoint in
tests/e2e/test_local_model.py.)"""

from __future__ import annotations

import socket
from typing import Any

from core.domain import ModelProfile
from core.ids import new_id, utc_now
from tests.conftest import Cluster
from tests.factories import make_agent, make_client, make_conversation
from tests.integration.access import conversations


def closed_port(cluster: Cluster) -> int:
    """A port the operator lists for model endpoints (WONDER_MODEL_ALLOWED_HOSTS) on which
    nothing listens."""
    port = cluster.model_ports[0]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # fails if something listens there
    return port


async def test_an_unreachable_endpoint_is_retried_then_fails_the_turn_retriably(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    profile = store.model_profiles.put(
        ModelProfile(
            id=f"openai-{new_id().lower()}",
            provider="openai",
            model="default",
            base_url=f"http://127.0.0.1:{closed_port(ray_cluster)}/v1",
        ),
        utc_now(),
    )
    client_id, _key = make_client(store)
    conv = make_conversation(store, client_id, make_agent(store, client_id, profile))
    port = conversations()
    stream = port.stream_events(conv.id, 0)
    assert (await anext(stream))["type"] == "conversation_started"
    ack = await port.post_message(conv.id, "hello?", "user-1")
    seen: list[dict[str, Any]] = []
    async for event in stream:
        seen.append(event)
        if event["type"] == "turn.failed":
            break
    await stream.aclose()
    assert [e["attempt"] for e in seen if e["type"] == "llm.retry"] == [1, 2]  # 3 attempts
    failed = seen[-1]
    assert failed["turn_id"] == ack.turn_id and "unreachable" in failed["reason"]
    assert failed["error"]["retriable"] is True
    assert store.turns.get(ack.turn_id).failure_reason == failed["reason"]


async def test_a_workflow_can_be_the_context_assembly_hook(ray_cluster: Cluster) -> None:
    """``context_assembly_workflow``: the hook runs as a workflow (on its coordinator) and its
    result is the request the model is sent."""
    from core.domain import TaskAction, TaskDef
    from core.workflows import WorkflowDef
    from tests.factories import scripted_profile

    store = ray_cluster.store
    task = store.tasks.put(
        TaskDef(
            id=f"reorder-{new_id().lower()}",
            actions=[
                TaskAction(
                    kind="python",
                    params={"callable": "library.adapters:newest_first_with_index"},
                )
            ],
        ),
        utc_now(),
    )
    workflow = store.workflows.put(
        WorkflowDef.model_validate(
            {
                "id": f"context-{new_id().lower()}",
                "nodes": [
                    {
                        "id": "assemble",
                        "kind": "task",
                        "target_id": task.id,
                        "input_mapping": {"request": "input.request"},
                    }
                ],
            }
        ),
        utc_now(),
    )
    client_id, _key = make_client(store)
    profile = scripted_profile(store, [{"reply": "SAW {{context}}"}])
    agent = make_agent(store, client_id, profile, context_assembly_workflow=workflow.id)
    conv = make_conversation(store, client_id, agent)
    port = conversations()
    ack = await port.post_message(conv.id, "first question", "user-1")
    outcome = await port.wait_for_turn(conv.id, ack.turn_id, 120)
    assert outcome.status.value == "completed", outcome
    answer = store.messages.list(conv.id)[-1].content
    assert answer.startswith("SAW ") and "Index of earlier questions:" in answer
