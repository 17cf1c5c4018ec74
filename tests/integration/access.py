"""The ports as this test process reaches the session's Ray (``cluster.wiring`` with this
process's ``WONDER_*`` settings, which the ``ray_cluster`` fixture set)."""

from __future__ import annotations

from typing import Any

from actors.workflow_coordinator.runs import WorkflowRunService
from cluster import wiring
from cluster.conversations import RayConversations
from core.jsontypes import JsonObject
from core.ports import MessageAck, RunParent
from core.settings import wonder_env
from core.store import Store, open_store
from core.workflows import NodeRecord, WorkflowRun


def conversations() -> RayConversations:
    return wiring.conversations(wonder_env())


def workflows() -> WorkflowRunService:
    return wiring.workflows(wonder_env())


def store() -> Store:
    return open_store(wonder_env())


# The workflow-run port's verbs, by the names the tests use.


async def start_workflow_run(
    workflow_id: str,
    input: JsonObject,
    version: int | None = None,
    parent: RunParent | None = None,
    *,
    client_id: str | None = None,
    run_id: str | None = None,
    project_id: str | None = None,
) -> str:
    return await workflows().start(
        workflow_id,
        input,
        version,
        parent,
        client_id=client_id,
        run_id=run_id,
        project_id=project_id,
    )


async def wait_for_run(run_id: str, timeout_s: float | None = None) -> WorkflowRun:
    return await workflows().wait(run_id, timeout_s)


def get_run(run_id: str, client_id: str | None = None) -> WorkflowRun:
    return workflows().get(run_id, client_id)


def get_history(run_id: str) -> list[NodeRecord]:
    return workflows().history(run_id)


async def cancel_run(run_id: str, reason: str = "cancelled") -> WorkflowRun:
    return await workflows().cancel(run_id, reason)


async def run_workflow_to_end(workflow_id: str, input: JsonObject) -> JsonObject:
    outcome = await workflows().run_to_end(workflow_id, input)
    return outcome.model_dump(mode="json")


async def post(conversation_id: str, content: str, author: str, **options: Any) -> MessageAck:
    """A user message to a conversation (``Conversations.post_message``)."""
    return await conversations().post_message(conversation_id, content, author, **options)
