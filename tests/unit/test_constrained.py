"""The constrained tool-calling protocol: request bodies, parsing, bounded schemas, and the
two-step exchange over a fake backend (no model, no Ray)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from core.domain import Tool
from core.errors import InvalidInput, RetryableError
from core.llm.constrained import (
    ARRAY_MAX_ITEMS,
    INTEGER_BOUND,
    REPLY,
    STRING_MAX_LENGTH,
    arguments_body,
    bounded_schema,
    chooser_body,
    describe_tool,
    native_body,
    parse_choice,
    plain_messages,
    reply_body,
    stream_chat,
)
from core.llm.openai_http import StreamTranslator, error_from_payload
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
)
from core.tool_shortcuts import shortcut_arguments

LIBRARY = Path(__file__).resolve().parents[2] / "library"
WEATHER = ToolSpec(
    "get_weather",
    "Get the current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ADD = ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "maximum": 10}},
        "required": ["a", "b"],
    },
)
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
]


def request(**kwargs: Any) -> ChatRequest:
    return ChatRequest(messages=list(HISTORY), tools=[WEATHER, ADD], **kwargs)


# --------------------------------------------------------------------------- bodies


def test_native_body_offers_tools_with_auto_choice() -> None:
    body = native_body(request(tool_calling="native"))
    assert body["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "add"]
    assert body["messages"] == HISTORY
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_chooser_body_is_an_enum_of_tools_and_reply_described_in_text() -> None:
    body = chooser_body(request(temperature=0.7))
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["action"]["enum"] == ["get_weather", "add", REPLY]
    assert schema["required"] == ["action"] and schema["additionalProperties"] is False
    assert body["temperature"] == 0.0
    assert "tools" not in body  # the template would drop them: they are described in text
    system = body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are helpful.")
    assert (
        "- get_weather: Get the current weather for a city. Arguments: city (string)."
        in (system["content"])
    )
    assert body["messages"][1:] == HISTORY[1:]


def test_chooser_adds_a_system_message_when_there_is_none() -> None:
    body = chooser_body(ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[WEATHER]))
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_arguments_body_names_the_tool_strictly_with_bounded_schema() -> None:
    body = arguments_body(request(max_tokens=4000), ADD)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    (tool,) = body["tools"]
    assert tool["function"]["strict"] is True
    params = tool["function"]["parameters"]
    assert params["properties"]["a"] == {
        "type": "integer",
        "minimum": -INTEGER_BOUND,
        "maximum": INTEGER_BOUND,
    }
    assert params["properties"]["b"]["maximum"] == 10  # kept
    assert params["additionalProperties"] is False
    assert body["max_tokens"] == 512


def test_reply_body_has_no_tools_and_plain_messages() -> None:
    body = reply_body(request())
    assert "tools" not in body and "response_format" not in body
    assert body["messages"] == HISTORY


# --------------------------------------------------------------------------- rendering


def test_plain_messages_render_tool_calls_and_results_as_text() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
        {
            "role": "user",
            "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "?"}],
        },
    ]
    assert plain_messages(messages) == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": '[Called get_weather with {"city": "Paris"}]'},
        {"role": "user", "content": '[Result of get_weather]\n{"sky": "sunny"}'},
        {"role": "user", "content": "and ?"},
    ]


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (WEATHER, "Get the current weather for a city. Arguments: city (string)."),
        (ToolSpec("ping", "  Ping\n the   server. ", {"type": "object"}), "Ping the server."),
        (
            ToolSpec("u", "Set unit.", {"properties": {"unit": {"enum": ["c", "f"]}}}),
            'Set unit. Arguments: unit ("c" | "f").',
        ),
    ],
)
def test_describe_tool(tool: ToolSpec, expected: str) -> None:
    assert describe_tool(tool) == expected


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action": "get_weather"}', "get_weather"),
        ('{\n  "action": "reply"\n}', REPLY),
        ('{"action": "rm_rf"}', REPLY),  # not offered
        ("get_weather", "get_weather"),  # a bare choice
        ('"add"', "add"),
        ("", REPLY),
        ("{broken", REPLY),
        ("[1, 2]", REPLY),
    ],
)
def test_parse_choice(text: str, expected: str) -> None:
    assert parse_choice(text, ["get_weather", "add"]) == expected


# --------------------------------------------------------------------------- schemas


def test_bounded_schema_bounds_every_generated_field_without_mutating() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "short": {"type": "string", "maxLength": 5},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "count": {"type": "integer", "minimum": 0},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nested": {"type": "object", "properties": {"x": {"type": ["string", "null"]}}},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
    }
    original = json.dumps(schema, sort_keys=True)
    out = bounded_schema(schema)
    assert json.dumps(schema, sort_keys=True) == original
    props = out["properties"]
    assert props["name"]["maxLength"] == STRING_MAX_LENGTH
    assert props["short"]["maxLength"] == 5
    assert "maxLength" not in props["unit"]
    assert props["count"] == {"type": "integer", "minimum": 0, "maximum": INTEGER_BOUND}
    assert props["ratio"]["maximum"] == INTEGER_BOUND
    assert props["tags"]["maxItems"] == ARRAY_MAX_ITEMS
    assert props["tags"]["items"]["maxLength"] == STRING_MAX_LENGTH
    assert props["nested"]["properties"]["x"]["maxLength"] == STRING_MAX_LENGTH
    assert props["nested"]["additionalProperties"] is False
    assert [s.get("maxLength") for s in props["either"]["anyOf"]] == [STRING_MAX_LENGTH, None]
    assert out["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(out)


def test_bounded_schema_keeps_explicit_additional_properties() -> None:
    out = bounded_schema({"type": "object", "additionalProperties": {"type": "string"}})
    assert out["additionalProperties"] == {"type": "string"}


# --------------------------------------------------------------------------- the exchange


@dataclass
class FakeBackend:
    """Answers each body with the next scripted list of chunks and records the bodies."""

    answers: list[list[ChatChunk]]
    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def stream_body(self, body: dict[str, Any], timeout_s: float) -> AsyncIterator[ChatChunk]:
        self.bodies.append(body)
        for chunk in self.answers[len(self.bodies) - 1]:
            yield chunk


async def collect(backend: FakeBackend, req: ChatRequest) -> list[ChatChunk]:
    return [chunk async for chunk in stream_chat(backend, req)]


async def test_a_chosen_tool_gives_one_tool_call_with_summed_usage() -> None:
    backend = FakeBackend(
        [
            [TextDelta('{"action": '), TextDelta('"get_weather"}'), ModelFinished(100, 8)],
            [
                ToolCallRequested("call_9", "get_weather", '{"city": "Paris"}'),
                ModelFinished(120, 9, "tool_calls"),
            ],
        ]
    )
    chunks = await collect(backend, request())
    assert chunks == [
        ToolCallRequested("call_9", "get_weather", '{"city": "Paris"}'),
        ModelFinished(220, 17, "tool_calls"),
    ]
    assert "response_format" in backend.bodies[0]
    assert backend.bodies[1]["tool_choice"]["function"]["name"] == "get_weather"


async def test_reply_streams_text_without_tools() -> None:
    backend = FakeBackend(
        [
            [TextDelta('{"action": "reply"}'), ModelFinished(100, 5)],
            [TextDelta("Hello"), TextDelta(" there"), ModelFinished(90, 2, "stop")],
        ]
    )
    chunks = await collect(backend, request())
    assert chunks == [TextDelta("Hello"), TextDelta(" there"), ModelFinished(190, 7, "stop")]
    assert "tools" not in backend.bodies[1]


async def test_fill_answered_in_text_becomes_the_arguments() -> None:
    backend = FakeBackend(
        [[TextDelta('{"action": "add"}'), ModelFinished()], [TextDelta(' {"a": 1, "b": 2} ')]]
    )
    chunks = await collect(backend, request())
    assert chunks[0] == ToolCallRequested("call_0", "add", '{"a": 1, "b": 2}')


async def test_native_mode_and_no_tools_make_one_call() -> None:
    backend = FakeBackend([[TextDelta("a"), ModelFinished()], [TextDelta("b"), ModelFinished()]])
    await collect(backend, request(tool_calling="native"))
    await collect(backend, ChatRequest(messages=list(HISTORY)))
    assert backend.bodies[0]["tool_choice"] == "auto"
    assert "tools" not in backend.bodies[1]


# --------------------------------------------------------------------------- stream translation


def test_translator_assembles_tool_call_fragments_and_usage() -> None:
    translator = StreamTranslator()
    payloads = [
        {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "get_weather"}}
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]}}
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "Oslo"}'}}]}}
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}},
    ]
    assert [c for p in payloads for c in translator.feed(p)] == []
    assert translator.finish() == [
        ToolCallRequested("c1", "get_weather", '{"city": "Oslo"}'),
        ModelFinished(10, 4, "tool_calls"),
    ]


def test_translator_raises_error_payloads_by_retryability() -> None:
    with pytest.raises(InvalidInput):
        StreamTranslator().feed({"error": {"message": "bad", "code": 400}})
    assert isinstance(error_from_payload({"message": "boom", "code": 500}), RetryableError)
    assert isinstance(error_from_payload({"message": "busy", "code": 429}), RetryableError)


def test_a_rejection_names_the_model_asked_for_never_the_providers_text() -> None:
    payload = {"error": {"message": "key sk-secret is not valid", "code": 404, "type": "NotFound"}}
    with pytest.raises(InvalidInput) as rejected:
        StreamTranslator(model="no-such-model").feed(payload)
    assert str(rejected.value) == (
        "model endpoint rejected the request for model 'no-such-model' (404, NotFound)"
    )
    assert "sk-secret" not in str(error_from_payload(payload["error"], "m"))


# --------------------------------------------------------------------------- shortcuts

CALC = ToolSpec(
    "calculator",
    "Evaluate an expression.",
    {"type": "object", "properties": {"expression": {"type": "string"}}},
    shortcut=r"(?i)^what is (?P<expression>[0-9][0-9 +*/-]*)\??$",
)


@pytest.mark.parametrize(
    ("messages", "expected_calls"),
    [
        ([{"role": "user", "content": "What is 12*7?"}], 0),  # the pattern chose: no model call
        ([{"role": "user", "content": "What is the time?"}], 2),  # no match: choose and reply
        (
            [
                {"role": "user", "content": "What is 12*7?"},
                {"role": "tool", "tool_call_id": "call_shortcut", "content": "84"},
            ],
            2,  # the tool's result goes back to the model
        ),
    ],
)
async def test_a_shortcut_calls_its_tool_only_for_a_matching_user_message(
    messages: list[dict[str, Any]], expected_calls: int
) -> None:
    backend = FakeBackend([[TextDelta('{"action": "reply"}')], [TextDelta("84"), ModelFinished()]])
    chunks = await collect(backend, ChatRequest(messages=messages, tools=[WEATHER, CALC]))
    assert len(backend.bodies) == expected_calls
    if expected_calls == 0:
        assert chunks == [
            ToolCallRequested("call_shortcut", "calculator", '{"expression": "12*7"}'),
            ModelFinished(finish_reason="tool_calls"),
        ]


def test_the_shortcut_is_never_sent_to_a_model() -> None:
    assert "shortcut" not in json.dumps(native_body(ChatRequest(messages=HISTORY, tools=[CALC])))


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(?P<expression>\\d+", "does not compile"),
        ("\\d+", "no named group"),
        ("(?P<city>\\w+)", "not in input_schema"),
        ("(?P<expression>a)\\1", "does not compile"),  # backreferences: not linear, refused
    ],
)
def test_a_tool_with_an_unusable_shortcut_is_refused(pattern: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Tool.model_validate(
            {
                "id": "calc",
                "name": "calc",
                "description": "",
                "target_type": "task",
                "target_id": "calculator",
                "input_schema": {"type": "object", "properties": {"expression": {}}},
                "shortcut": {"pattern": pattern},
            }
        )


def test_a_catastrophic_shortcut_pattern_runs_in_linear_time() -> None:
    # (a+)+$ backtracks exponentially in Python's re on "aaaa…b"; RE2 answers at once.
    assert shortcut_arguments("^(?P<expression>(a+)+)$", "a" * 1_500 + "b") is None


def test_the_shipped_calculator_shortcut_takes_arithmetic_questions_only() -> None:
    tool = Tool.model_validate(yaml.safe_load((LIBRARY / "tools" / "calculator.yaml").read_text()))
    pattern = tool.shortcut
    assert pattern is not None
    asked = {
        "What is 12*7?": {"expression": "12*7"},
        "calculate (3 + 4) * 2": {"expression": "(3 + 4) * 2"},
        "How much is 100 / 7 ?": {"expression": "100 / 7"},
        "What is the capital of France?": None,
        "call 555-1234": None,
        "What is 12*7? And also tell me a joke": None,
    }
    for text, arguments in asked.items():
        found = shortcut_arguments(pattern.pattern, text)
        assert (json.loads(found) if found else None) == arguments, text
