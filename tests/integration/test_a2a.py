"""Agent2Agent: the ``a2a-sdk``'s own client against the gateway over real HTTP, a scripted model
answering (docs/protocols.md): the agent card, a streamed task, tasks read back, continued and
cancelled, and the refusals (no key, another client's agent, a non-member user)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from a2a.client import A2AClientError, Client, ClientConfig, create_client
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from core.ids import new_id
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client
from tests.integration.test_gateway_stream import scripted_agent


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "a2a-user")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        yield client


@asynccontextmanager
async def a2a(
    gateway_url: str,
    agent_id: str,
    key: str | None,
    user: str | None = None,
    streaming: bool = True,
) -> AsyncIterator[Client]:
    """The SDK's client for one agent, from its card (fetched with the same key)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if user:
        headers["X-Wonder-User"] = user
    async with httpx.AsyncClient(headers=headers, timeout=120, trust_env=False) as http:
        client = await create_client(
            f"{gateway_url}/a2a/agents/{agent_id}",
            # polling: message/send answers at once (returnImmediately) when not streaming
            ClientConfig(httpx_client=http, streaming=streaming, polling=not streaming),
        )
        try:
            yield client
        finally:
            await client.close()


def user_message(text: str, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=new_id("msg"),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    return SendMessageRequest(message=message)


async def events_of(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


def streamed_answer(events: list[StreamResponse]) -> str:
    return "".join(
        part.text
        for e in events
        if e.HasField("artifact_update")
        for part in e.artifact_update.artifact.parts
    )


async def test_the_sdk_client_streams_an_agents_answer(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "the agent heard: {{last_user}}"}])
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, trust_env=False) as h:
        card = await A2ACardResolver(h, f"{gateway_url}/a2a/agents/{agent_id}").get_agent_card()
    assert card.name == "scripted" and card.capabilities.streaming
    assert card.supported_interfaces[0].url == f"{gateway_url}/a2a/agents/{agent_id}"
    assert card.skills[0].id == agent_id and "wonderApiKey" in card.security_schemes

    async with a2a(gateway_url, agent_id, key) as client:
        events = await events_of(client, user_message("hello over A2A"))
        first, last = events[0], events[-1]
        assert first.HasField("task") and first.task.status.state == TaskState.TASK_STATE_WORKING
        task_id, context_id = first.task.id, first.task.context_id
        assert streamed_answer(events) == "the agent heard: hello over A2A"
        chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
        assert chunks[-1].last_chunk and all(c.task_id == task_id for c in chunks)
        assert last.HasField("status_update")
        assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED

        # The task is the turn, its context the conversation: read back over A2A and REST.
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
        assert task.artifacts[0].parts[0].text == "the agent heard: hello over A2A"
        turn = api.get(f"/v1/conversations/{context_id}/turns/{task_id}").json()
        assert turn["status"] == "completed" and turn["agent_id"] == agent_id
        messages = api.get(f"/v1/conversations/{context_id}/messages").json()["items"]
        assert [m["content"] for m in messages] == [
            "hello over A2A",
            "the agent heard: hello over A2A",
        ]

        # The same context continues the conversation: a new task, the same conversation.
        again = await events_of(client, user_message("once more", context_id=context_id))
        assert again[0].task.context_id == context_id and again[0].task.id != task_id
        assert streamed_answer(again) == "the agent heard: once more"
        listed = await client.list_tasks(
            ListTasksRequest(context_id=context_id, include_artifacts=True)
        )
        assert [t.id for t in listed.tasks] == [task_id, again[0].task.id]

        # A finished task takes no more messages (its conversation does).
        with pytest.raises((A2AError, A2AClientError)) as refused:
            await events_of(client, user_message("more?", context_id, task_id=task_id))
        assert f"contextId {context_id}" in str(refused.value)


async def test_message_send_without_streaming_and_the_0_3_method_names(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "plain: {{last_user}}"}])
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=120, trust_env=False) as http:
        client = await create_client(
            f"{gateway_url}/a2a/agents/{agent_id}",
            ClientConfig(httpx_client=http, streaming=False),
        )
        events = await events_of(client, user_message("no stream"))
        assert len(events) == 1 and events[0].HasField("task")
        task = events[0].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[0].parts[0].text == "plain: no stream"
        await client.close()
        # A 0.3 client's method names reach the same handler.
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "params": {"id": task.id},
        }
    # A client of its own: the SDK's client set its version header (1.0) on the one it was given.
    async with httpx.AsyncClient(headers=headers, timeout=120, trust_env=False) as old:
        answer = (await old.post(f"{gateway_url}/a2a/agents/{agent_id}", json=body)).json()
        assert "result" in answer, answer
        assert answer["result"]["id"] == task.id, answer
        assert answer["result"]["status"]["state"] == "completed", answer


async def test_a_task_is_followed_and_cancelled_like_its_turn(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "too late", "delay_s": 60}])
    async with (
        a2a(gateway_url, agent_id, key, streaming=False) as client,
        a2a(gateway_url, agent_id, key) as streaming,
    ):
        events = [e async for e in client.send_message(user_message("take your time"))]
        task_id = events[0].task.id
        assert events[0].task.status.state == TaskState.TASK_STATE_WORKING

        # Another client follows the running task; the cancel ends what it follows.
        followed: list[StreamResponse] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
                followed.append(event)
                subscribed.set()

        follower = asyncio.create_task(follow())
        await asyncio.wait_for(subscribed.wait(), 120)
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(follower, 120)
        assert followed[0].task.status.state == TaskState.TASK_STATE_WORKING
        assert followed[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED

        # Read back: the turn is over, as cancelled (its conversation's log says so too).
        task = await client.get_task(GetTaskRequest(id=task_id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED, task
        turn = api.get(f"/v1/conversations/{task.context_id}/turns/{task_id}").json()
        assert turn["status"] == "failed", turn
        with pytest.raises((A2AError, A2AClientError)):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises((A2AError, A2AClientError)):  # over: read it with GetTask
            [e async for e in streaming.subscribe(SubscribeToTaskRequest(id=task_id))]


async def test_refusals(
    gateway_url: str, api: httpx.Client, key: str, ray_cluster: Cluster
) -> None:
    agent_id = scripted_agent(api, [{"reply": "mine"}])
    endpoint = f"{gateway_url}/a2a/agents/{agent_id}"
    # No key: neither the card nor the endpoint.
    async with httpx.AsyncClient(timeout=30, trust_env=False) as anonymous:
        card = await anonymous.get(f"{endpoint}/.well-known/agent-card.json")
        assert card.status_code == 401 and card.json()["error"]["code"] == "UNAUTHORIZED"
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        assert (await anonymous.post(endpoint, json=body)).status_code == 401

    # Another client's agent is not there, and neither are its tasks.
    async with a2a(gateway_url, agent_id, key) as mine:
        events = await events_of(mine, user_message("private"))
        task_id, context_id = events[0].task.id, events[0].task.context_id
    stranger = make_client(ray_cluster.store, "a2a-stranger")[1]
    headers = {"Authorization": f"Bearer {stranger}"}
    async with httpx.AsyncClient(headers=headers, timeout=30, trust_env=False) as other:
        resolver = A2ACardResolver(other, endpoint)
        with pytest.raises(Exception, match="404"):
            await resolver.get_agent_card()
        refused = await other.post(endpoint, json=body)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "NOT_FOUND"
    with http_client(gateway_url, stranger) as stranger_api:
        own_agent = scripted_agent(stranger_api, [{"reply": "theirs"}])
    async with a2a(gateway_url, own_agent, stranger) as theirs:
        with pytest.raises((A2AError, A2AClientError), match="not found"):
            await theirs.get_task(GetTaskRequest(id=task_id))
        with pytest.raises((A2AError, A2AClientError), match="not found"):
            await events_of(theirs, user_message("let me in", context_id=context_id))

    # Inside the client, an acting user reaches only the conversations it is a member of.
    private = api.post(
        "/v1/conversations", json={"agent_id": agent_id}, headers={"X-Wonder-User": "owner-u"}
    ).json()["id"]
    async with a2a(gateway_url, agent_id, key, user="owner-u") as owner:
        events = await events_of(owner, user_message("mine", context_id=private))
        owned_task = events[0].task.id
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    async with a2a(gateway_url, agent_id, key, user="someone-else") as outsider:
        for attempt in (
            outsider.get_task(GetTaskRequest(id=owned_task)),
            events_of(outsider, user_message("let me in", context_id=private)),
            outsider.list_tasks(ListTasksRequest(context_id=private)),
            outsider.cancel_task(CancelTaskRequest(id=owned_task)),
        ):
            with pytest.raises((A2AError, A2AClientError), match="not found"):
                await attempt
    messages = api.get(f"/v1/conversations/{private}/messages").json()["items"]
    assert [m["content"] for m in messages] == ["mine", "mine"], messages
    assert MessageToDict(events[0].task)["contextId"] == private
