"""The local model for real: vLLM on CPU in Ray Serve, SmolLM2-135M-Instruct, no scripted model.

The OpenAI client over HTTP, ``VllmHandleModel`` through a deployment handle, and the constrained
tool-calling mode (a schema-valid tool call when a tool is asked for, plain text otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from core.errors import InvalidInput
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
)
from serving.llm_client import VllmHandleModel
from tests.e2e.conftest import LlmApp

pytestmark = pytest.mark.e2e

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 60}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
ADD = ToolSpec(
    "add_numbers",
    "Add two integers and return the sum.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


def test_openai_client_lists_models_and_streams(llm_app: LlmApp) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=llm_app.base_url, api_key="unused", max_retries=0, timeout=60)
    names = {m.id for m in client.models.list()}
    assert {llm_app.model, "default"} <= names

    stream = client.chat.completions.create(
        model=llm_app.model,
        messages=[{"role": "user", "content": "Say hello in one short sentence."}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert len(deltas) > 3 and "".join(deltas).strip()
    assert usage is not None and 0 < usage.completion_tokens <= 24

    whole = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=8
    )
    assert whole.choices[0].message.content


def test_openai_errors_keep_the_openai_shape(llm_app: LlmApp) -> None:
    import httpx

    response = httpx.post(
        f"{llm_app.base_url}/chat/completions",
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
        timeout=30,
        trust_env=False,
    )
    assert response.status_code == 404
    assert "no-such-model" in response.json()["error"]["message"]
    invalid = httpx.post(
        f"{llm_app.base_url}/chat/completions",
        json={"model": "default", "messages": "not a list"},
        timeout=30,
        trust_env=False,
    )
    assert invalid.status_code == 400 and invalid.json()["error"]["message"]


async def test_handle_model_reports_rejected_requests_as_invalid_input(llm_app: LlmApp) -> None:
    request = ChatRequest(messages=[{"role": "user", "content": "x"}], model="no-such-model")
    with pytest.raises(InvalidInput, match="no-such-model"):
        await collect(request)


def niceness(pid: int) -> int:
    """A process's niceness (field 19 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (from /proc: field 4 of stat is the parent)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def test_the_model_replica_and_its_engine_run_at_the_llm_niceness(llm_app: LlmApp) -> None:
    """``WONDER_LLM_NICENESS`` (10), not Ray's worker niceness (15), for the replica and the
    EngineCore processes it starts: the engine's threads decode on every core of a CPU node and
    must not yield them to any worker that wakes (docs/local-model.md, "Token batches")."""
    from ray.util.state import list_actors

    from tests.conftest import dashboard_url

    alive = list_actors(
        address=dashboard_url(), filters=[("state", "=", "ALIVE")], limit=10_000, detail=True
    )
    replicas = [int(a.pid) for a in alive if a.class_name.startswith("ServeReplica:llm:")]
    assert replicas
    for pid in replicas:
        family = [pid, *descendants(pid)]
        assert len(family) > 1, "the replica started no engine process"
        assert {niceness(p) for p in family} == {llm_app.settings.llm_niceness}


async def collect(request: ChatRequest) -> list[ChatChunk]:
    return [chunk async for chunk in VllmHandleModel(model="default").stream(request)]


async def test_handle_model_streams_tokens(llm_app: LlmApp) -> None:
    request = ChatRequest(
        messages=[SYSTEM, {"role": "user", "content": "Tell me a short story about a cat."}],
        max_tokens=32,
    )
    chunks = await collect(request)
    texts = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert len(texts) > 5 and "".join(texts).strip()
    assert isinstance(chunks[-1], ModelFinished)
    assert chunks[-1].prompt_tokens > 0 and 0 < chunks[-1].completion_tokens <= 32


async def test_constrained_mode_calls_a_tool_with_schema_valid_arguments(llm_app: LlmApp) -> None:
    request = ChatRequest(
        messages=[
            SYSTEM,
            {
                "role": "user",
                "content": "Use the get_weather tool to look up the weather in Tokyo.",
            },
        ],
        tools=[WEATHER, ADD],
        max_tokens=64,
    )
    chunks = await collect(request)
    calls = [c for c in chunks if isinstance(c, ToolCallRequested)]
    assert [c.name for c in calls] == ["get_weather"], chunks
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER.parameters)
    assert not [c for c in chunks if isinstance(c, TextDelta)]
    assert chunks[-1] == ModelFinished(
        chunks[-1].prompt_tokens, chunks[-1].completion_tokens, "tool_calls"
    )


async def test_constrained_mode_answers_in_text_when_no_tool_is_needed(llm_app: LlmApp) -> None:
    request = ChatRequest(
        messages=[SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
        tools=[WEATHER, ADD],
        max_tokens=48,
    )
    chunks = await collect(request)
    assert not [c for c in chunks if isinstance(c, ToolCallRequested)], chunks
    text = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert "Paris" in text


# --------------------------------------------------------------------------- the whole path

CALCULATOR_SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 60}},
    "required": ["expression"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def local_agent(llm_app: LlmApp, ray_cluster: Any, serve_port: int) -> Iterator[AgentSession]:
    """Gateway + an agent whose persona uses the local model (constrained) and a calculator."""
    from tests.factories import make_client
    from tests.integration.test_gateway import deploy_gateway, http_client, unique

    url = deploy_gateway(ray_cluster, serve_port)
    key = make_client(ray_cluster.store, "local-model-e2e")[1]
    with http_client(url, key) as api:
        task_id, tool_id, profile_id, persona_id = (
            unique(p) for p in ("task", "tool", "local", "persona")
        )
        calculator_tool(api, task_id, tool_id)
        profile = {"provider": "vllm", "model": "default", "tool_calling": "constrained"}
        put(api, f"/v1/model-profiles/{profile_id}", {**profile, "max_tokens": 64})
        persona = {
            "system_prompt": "You are a helpful assistant.",
            "model_profile_id": profile_id,
            "tool_ids": [tool_id],
            "constraints": {"max_moves_per_turn": 2},
        }
        put(api, f"/v1/personas/{persona_id}", persona)
        agent = api.post("/v1/agents", json={"name": "local", "persona_ref": {"id": persona_id}})
        assert agent.status_code == 201, agent.text
        conversation = api.post("/v1/conversations", json={"agent_id": agent.json()["id"]})
        assert conversation.status_code == 201, conversation.text
        yield AgentSession(url=url, key=key, api=api, conversation_id=conversation.json()["id"])


CALCULATE = {"kind": "python", "params": {"callable": "library.callables:calculate"}}


@dataclass
class AgentSession:
    url: str
    key: str
    api: Any  # httpx.Client
    conversation_id: str


def put(api: Any, path: str, body: dict[str, Any]) -> None:
    response = api.put(path, json=body)
    assert response.status_code == 200, response.text


def calculator_tool(api: Any, task_id: str, tool_id: str) -> None:
    """The library's calculator as task ``task_id`` and a tool ``tool_id`` over it."""
    put(api, f"/v1/tasks/{task_id}", {"actions": [CALCULATE]})
    tool = {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression such as 2 * (3 + 4).",
        "input_schema": CALCULATOR_SCHEMA,
        "target_type": "task",
        "target_id": task_id,
    }
    put(api, f"/v1/tools/{tool_id}", tool)


def chat(session: AgentSession, content: str) -> list[dict[str, Any]]:
    """Send ``content`` over the conversation's WebSocket; the frames up to the turn's end."""
    from websockets.sync.client import connect

    path = f"/v1/conversations/{session.conversation_id}"
    stored = session.api.get(f"{path}/events", params={"limit": 10_000}).json()["items"]
    after_seq = max((e["seq"] for e in stored), default=0)  # only this turn's events
    ws_url = session.url.replace("http://", "ws://")
    frames: list[dict[str, Any]] = []
    with connect(
        f"{ws_url}{path}/stream?after_seq={after_seq}",
        additional_headers={"Authorization": f"Bearer {session.key}"},
        proxy=None,
        open_timeout=30,
    ) as ws:
        ws.send(json.dumps({"type": "message", "content": content, "id": "m"}))
        while True:
            frame = json.loads(ws.recv(timeout=180))
            frames.append(frame)
            if frame["type"] in ("turn.completed", "turn.failed"):
                return frames


def test_whole_path_tool_call_then_streamed_reply(local_agent: AgentSession) -> None:
    frames = chat(local_agent, "Use the calculator tool to compute 12 * 7.")
    assert frames[-1]["type"] == "turn.completed", frames[-1]
    moves = [f["move"] for f in frames if f["type"] == "move" and f["move"].get("tool_call")]
    assert moves, [f["type"] for f in frames]
    call = moves[0]["tool_call"]
    assert call["name"] == "calculator"
    jsonschema.validate(call["input"], CALCULATOR_SCHEMA)  # the grammar made it valid
    assert moves[0]["tool_result"] is not None  # the tool ran (its verdict goes back to the model)
    last_move = max(
        i for i, f in enumerate(frames) if f["type"] == "move" and f["move"].get("tool_call")
    )
    tokens = [f["delta"] for f in frames[last_move:] if f["type"] == "token"]
    assert len(tokens) > 2 and "".join(tokens).strip()  # the answer after the tool was streamed
    message = [f["message"] for f in frames if f["type"] == "message"][-1]
    assert message["role"] == "agent" and message["content"] == "".join(tokens)


def test_whole_path_plain_reply_without_tools(local_agent: AgentSession) -> None:
    frames = chat(local_agent, "What is the capital of France?")
    assert frames[-1]["type"] == "turn.completed", frames[-1]
    assert not [f for f in frames if f["type"] == "move" and f["move"].get("tool_call")]
    tokens = [f["delta"] for f in frames if f["type"] == "token"]
    assert len(tokens) > 2 and "Paris" in "".join(tokens)


def test_whole_path_through_the_openai_provider(local_agent: AgentSession, llm_app: LlmApp) -> None:
    """``provider: openai`` against the project's own OpenAI-compatible endpoint (``/llm/v1``):
    a turn end to end over HTTP streaming instead of the deployment handle."""
    from tests.integration.test_gateway import unique

    api = local_agent.api
    profile_id, persona_id = unique("openai"), unique("persona")
    profile = {
        "provider": "openai",
        "model": "default",
        "base_url": llm_app.base_url,
        "tool_calling": "constrained",
        "max_tokens": 48,
    }
    put(api, f"/v1/model-profiles/{profile_id}", profile)
    persona = {"system_prompt": "You are a helpful assistant.", "model_profile_id": profile_id}
    put(api, f"/v1/personas/{persona_id}", persona)
    agent = api.post("/v1/agents", json={"name": "openai", "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    created = api.post("/v1/conversations", json={"agent_id": agent.json()["id"]})
    assert created.status_code == 201, created.text
    session = AgentSession(local_agent.url, local_agent.key, api, created.json()["id"])
    frames = chat(session, "What is the capital of France?")
    assert frames[-1]["type"] == "turn.completed", frames[-1]
    tokens = [f["delta"] for f in frames if f["type"] == "token"]
    assert len(tokens) > 2 and "Paris" in "".join(tokens)
