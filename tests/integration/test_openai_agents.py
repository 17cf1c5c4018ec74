"""OpenAI chat completions answered by agents: the official ``openai`` client against the gateway
over real HTTP, a scripted model answering (docs/protocols.md)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client, unique
from tests.integration.test_gateway_stream import scripted_agent


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "openai-user")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        yield client


def openai_client(base_url: str, key: str) -> openai.OpenAI:
    transport = httpx.Client(trust_env=False, timeout=120)
    return openai.OpenAI(base_url=base_url, api_key=key, http_client=transport)


def test_openai_client_streams_an_agents_answer(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "the agent heard: {{last_user}}"}])
    # The agent's own route: {base_url}/chat/completions with the agent in the base URL.
    client = openai_client(f"{gateway_url}/v1/agents/{agent_id}", key)
    stream = client.chat.completions.create(
        model="anything",
        messages=[{"role": "user", "content": "hello agent"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "the agent heard: hello agent"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    conversation_id = chunks[0].model_extra["conversation_id"]  # type: ignore[index]
    # The turn is a turn like any other: its messages are in the conversation.
    messages = api.get(f"/v1/conversations/{conversation_id}/messages").json()["items"]
    assert [m["role"] for m in messages] == ["user", "agent"]
    assert messages[1]["content"] == "the agent heard: hello agent"


def test_openai_client_model_agent_prefix_and_continuing(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "echo {{last_user}}"}])
    client = openai_client(f"{gateway_url}/v1", key)
    first = client.chat.completions.create(
        model=f"agent:{agent_id}", messages=[{"role": "user", "content": "one"}]
    )
    assert first.choices[0].message.content == "echo one"
    assert first.model == f"agent:{agent_id}"
    conversation_id = first.model_extra["conversation_id"]  # type: ignore[index]
    second = client.chat.completions.create(
        model=f"agent:{agent_id}",
        messages=[{"role": "user", "content": "two"}],
        metadata={"conversation_id": conversation_id},
    )
    assert second.choices[0].message.content == "echo two"
    assert second.model_extra["conversation_id"] == conversation_id  # type: ignore[index]
    turns = api.get(f"/v1/conversations/{conversation_id}/turns").json()["items"]
    assert len(turns) == 2


def test_agent_route_and_refusals(
    gateway_url: str, api: httpx.Client, ray_cluster: Cluster
) -> None:
    agent_id = scripted_agent(api, [{"reply": "fine"}])
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    answered = api.post(f"/v1/agents/{agent_id}/chat/completions", json=body)
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"] == "fine"
    assert answered.headers["x-wonder-conversation"] == answered.json()["conversation_id"]

    def refused(path: str, payload: dict[str, object]) -> dict[str, object]:
        response = api.post(path, json=payload)
        assert 400 <= response.status_code < 500, response.text
        return {"status": response.status_code, **response.json()["error"]}

    route = f"/v1/agents/{agent_id}/chat/completions"
    assert refused(route, {**body, "tools": [{"type": "function"}]})["status"] == 422
    assert refused(route, {**body, "n": 2})["status"] == 422
    last_not_user = {"messages": [{"role": "assistant", "content": "hi"}]}
    assert refused(route, last_not_user)["status"] == 422
    assert refused("/v1/agents/agent_nope/chat/completions", body)["status"] == 404
    assert refused("/v1/chat/completions", {**body, "model": "gpt-4"})["status"] == 404
    # Another client's agent and conversation are not there for this key.
    with http_client(gateway_url, make_client(ray_cluster.store, "stranger")[1]) as other:
        assert other.post(route, json=body).status_code == 404
        conversation = answered.json()["conversation_id"]
        continuing = {**body, "metadata": {"conversation_id": conversation}}
        assert other.post(route, json=continuing).status_code == 404
    with http_client(gateway_url, None) as anonymous:
        assert anonymous.post(route, json=body).status_code == 401
    # Long content (a message of the conversation may be 100,000 characters), but not more
    # than one message may hold once the earlier ones are quoted.
    long = {"messages": [{"role": "user", "content": "x" * 5000}]}
    assert api.post(route, json=long).status_code == 200
    too_long = {"messages": [{"role": "user", "content": "x" * 60_000}] * 2}
    assert refused(route, too_long)["status"] == 422


def test_a_failed_turn_is_409_when_asking_again_cannot_help(api: httpx.Client) -> None:
    persona_id = unique("persona")
    persona = {"system_prompt": "x", "model_profile_id": "no-such-profile"}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    made = api.post("/v1/agents", json={"name": "broken", "persona_ref": {"id": persona_id}})
    body = {"messages": [{"role": "user", "content": "hi"}]}
    answer = api.post(f"/v1/agents/{made.json()['id']}/chat/completions", json=body)
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert "no-such-profile" in error["message"] and error["retriable"] is False
