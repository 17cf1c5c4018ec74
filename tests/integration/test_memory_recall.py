"""Cross-conversation recall: what the user says in one conversation, the agent recalls in another.

Real Conversation actors, the shipped ``context_assembly`` / ``memory_extraction`` tasks on the
executor, the real embedding model behind the Embedder deployment; scripted models for determinism.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from core.domain import MessageRole, TaskDef, TurnStatus
from core.ids import utc_now
from tests.conftest import Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile
from tests.integration.access import post

LIBRARY = Path(__file__).resolve().parents[2] / "library" / "tasks"


def library_task(name: str) -> TaskDef:
    return TaskDef.model_validate(yaml.safe_load((LIBRARY / f"{name}.yaml").read_text()))


async def finish(cluster: Cluster, turn_id: str) -> None:
    """Until the turn is over and so is its memory extraction (which runs after it completes)."""

    def done() -> bool:
        turn = cluster.store.turns.get(turn_id)
        return turn.status is not TurnStatus.ACTIVE and not turn.issues.memory_extraction_pending

    await async_wait_for(done, timeout=120)
    turn = cluster.store.turns.get(turn_id)
    assert turn.status is TurnStatus.COMPLETED, turn.failure_reason
    assert not turn.issues.memory_extraction_failed


async def test_a_fact_from_one_conversation_is_recalled_in_another(
    ray_cluster: Cluster, embedder_app: str
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    fact = {
        "type": "fact",
        "subject": "user.favourite_colour",
        "content": "The user's favourite colour is teal.",
        "significance": 0.9,
    }
    extractor = scripted_profile(store, [{"reply": json.dumps({"memories": [fact]})}])
    # The shipped extraction task, pointed at the scripted extractor instead of the agent's model.
    shipped = library_task("memory_extraction")
    llm_step = shipped.actions[0].model_copy(
        update={"params": {**shipped.actions[0].params, "model_profile": extractor.id}}
    )
    extraction = store.tasks.put(
        shipped.model_copy(
            update={
                "id": f"memory_extraction-{extractor.id}",
                "actions": [llm_step, *shipped.actions[1:]],
            }
        ),
        utc_now(),
    )
    assembly = store.tasks.put(library_task("context_assembly"), utc_now())
    talker = scripted_profile(store, [{"reply": "I remember: {{context}}"}])
    agent = make_agent(
        store,
        client_id,
        talker,
        context_assembly_task_id=assembly.id,
        memory_extraction_task_id=extraction.id,
    )

    first = make_conversation(store, client_id, agent)
    told = await post(first.id, "By the way, my favourite colour is teal.", "u1")
    await finish(ray_cluster, told.turn_id)

    second = make_conversation(store, client_id, agent)
    asked = await post(second.id, "What is my favourite colour?", "u1")
    await finish(ray_cluster, asked.turn_id)
    answer = [m for m in store.messages.list(second.id) if m.role is MessageRole.AGENT][-1]
    assert "The user's favourite colour is teal." in answer.content
    # The second conversation never saw the first one's messages: the memory carried it.
    assert all(
        "teal" not in m.content
        for m in store.messages.list(second.id)
        if m.role is MessageRole.USER
    )
