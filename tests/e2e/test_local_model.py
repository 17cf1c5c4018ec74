"""The local model for real: vLLM on CPU in Ray Serve, SmolLM2-135M-Instruct, no scripted model.

The OpenAI client over HTTP, ``VllmHandleModel`` through a deployment handle, and the constrained
tool-calling mode (a schema-valid tool call when a tool is asked for, plain text otherwise).
"""

from __future__ import annotations

import json

import jsonschema
import pytest

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
