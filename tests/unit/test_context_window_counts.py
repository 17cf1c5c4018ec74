"""Exact context-window counts (``core.context_window``): the prompts a tokenizer is asked for,
and the sections made of its answers, which add up to the whole request's count.

The tokenizer here is a stand-in for the local deployment's (which the e2e tier runs for real,
``tests/e2e/test_context_window_tokens.py``): a ChatML-style template whose tokens are its markers
and the words of each message, so each section's expected count can be read off the request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.context_window import (
    Cut,
    PromptCounts,
    context_window,
    exact_tokens,
    prompt_cuts,
    prompt_probes,
)
from core.jsontypes import JsonObject
from core.memory.context import assemble_context

ASSEMBLED = assemble_context(
    [{"type": "fact", "content": "works on payments"}],
    tools=[{"name": "shout", "description": "Shout it"}],
)
MEMORIES, TOOL_LIST = ASSEMBLED.split("\n\n")
PROMPT = "Be brief.\n\nAlways polite."
TOOLS = [{"type": "function", "function": {"name": "shout", "parameters": {}}}]


def system(content: str) -> JsonObject:
    return {"role": "system", "content": content}


def user(content: str) -> JsonObject:
    return {"role": "user", "content": content}


def agent(content: str) -> JsonObject:
    return {"role": "assistant", "content": content}


def template_tokens(body: JsonObject) -> int:
    """A ChatML-like template: ``<|im_start|> role words… <|im_end|>`` per message, the tools
    as a block of JSON words, ``<|im_start|> assistant`` as the generation prompt."""
    tokens = 0
    if body.get("tools"):
        tokens += 2 + len(json.dumps(body["tools"]).split())
    for message in body["messages"]:
        tokens += 3 + len(str(message["content"]).split())
    if body.get("add_generation_prompt", True):
        tokens += 2
    return tokens


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize(
    ("messages", "cuts"),
    [
        pytest.param(
            [user("hi")],
            [Cut(1, None, "history")],
            id="no system message",
        ),
        pytest.param(
            [system(f"{PROMPT}\n\n{ASSEMBLED}"), user("a"), agent("b"), user("c")],
            [
                Cut(0, len(PROMPT), "system_prompt"),
                Cut(0, len(f"{PROMPT}\n\n{MEMORIES}"), "memories"),
                Cut(1, None, "assembled_context"),
                Cut(4, None, "history"),
            ],
            id="prompt, memories, the rest, then the history",
        ),
        pytest.param(
            [system(MEMORIES), user("a")],
            [Cut(1, None, "memories"), Cut(2, None, "history")],
            id="memories only",
        ),
        pytest.param(
            [system("Be brief."), user("a"), system("Answer now.")],
            [Cut(1, None, "system_prompt"), Cut(2, None, "history"), Cut(3, None, "system_prompt")],
            id="a system note after the history",
        ),
        pytest.param(
            [system(f"Be brief.\n\n{TOOL_LIST}"), system("Answer now."), user("a")],
            [
                Cut(0, 9, "system_prompt"),
                Cut(2, None, "assembled_context"),
                Cut(3, None, "history"),
            ],
            id="after the assembled context, a system message is more of it",
        ),
        pytest.param(
            [system(f"Be brief.\n\n{MEMORIES}\n\nAlso kind."), user("a")],
            [
                Cut(0, 9, "system_prompt"),
                Cut(0, len(f"Be brief.\n\n{MEMORIES}"), "memories"),
                Cut(1, None, "system_prompt"),
                Cut(2, None, "history"),
            ],
            id="prompt text after the memories",
        ),
        pytest.param([], [], id="no messages"),
    ],
)
def test_the_cuts_follow_the_sections_in_order(messages: list[JsonObject], cuts: list[Cut]) -> None:
    assert prompt_cuts({"messages": messages}) == cuts


def test_the_probes_are_the_request_then_prefixes_without_tools_or_generation_prompt() -> None:
    request: JsonObject = {
        "model": "smol",
        "messages": [system(f"{PROMPT}\n\n{ASSEMBLED}"), user("hello there")],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "shout"}},
        "max_tokens": 32,
        "stream": True,
    }
    total, bare, *cuts = prompt_probes(request)
    assert total == request
    assert "tools" not in bare and "tool_choice" not in bare
    assert bare["messages"] == request["messages"] and "add_generation_prompt" not in bare
    assert [c["messages"][-1]["content"] for c in cuts] == [
        PROMPT,
        f"{PROMPT}\n\n{MEMORIES}",
        f"{PROMPT}\n\n{ASSEMBLED}",
        "hello there",
    ]
    for cut in cuts:
        assert cut["add_generation_prompt"] is False and cut["continue_final_message"] is False
        assert "tools" not in cut and "tool_choice" not in cut
        assert (cut["model"], cut["max_tokens"]) == ("smol", 32)
    without_tools = {k: v for k, v in request.items() if k not in ("tools", "tool_choice")}
    assert prompt_probes(without_tools)[0] == without_tools  # no tools: no tool-less probe
    assert len(prompt_probes(without_tools)) == len(cuts) + 1
    assert prompt_probes({"messages": []}) == []


REQUESTS: list[Any] = [
    pytest.param(
        {"messages": [system(f"{PROMPT}\n\n{ASSEMBLED}"), user("what now"), agent("ok")]},
        {
            "system_prompt": 3 + words(PROMPT),
            "memories": words(MEMORIES),
            "assembled_context": words(TOOL_LIST),
            "history": (3 + 2) + (3 + 1) + 2,  # two messages and the generation prompt
            "tool_specs": 0,
        },
        id="no tools",
    ),
    pytest.param(
        {"messages": [system("Be brief."), user("go")], "tools": TOOLS},
        {
            "system_prompt": 3 + 2,
            "memories": 0,
            "assembled_context": 0,
            "history": 3 + 1 + 2,
            "tool_specs": 2 + len(json.dumps(TOOLS).split()),
        },
        id="tools rendered by the template",
    ),
    pytest.param(
        {"messages": [user("go"), system("Answer now.")]},
        {
            "system_prompt": 3 + 2,
            "memories": 0,
            "assembled_context": 0,
            "history": 3 + 1 + 2,
            "tool_specs": 0,
        },
        id="a trailing system note",
    ),
]


@pytest.mark.parametrize(("request_body", "expected"), REQUESTS)
def test_exact_sections_add_up_to_the_whole_request(
    request_body: JsonObject, expected: dict[str, int]
) -> None:
    counts = [template_tokens(body) for body in prompt_probes(request_body)]
    sections = exact_tokens(request_body, counts)
    assert sections == expected
    assert sum(sections.values()) == counts[0] == template_tokens(request_body)

    window = context_window(
        "call_1",
        "vllm",
        "smol",
        request_body,
        reported_prompt_tokens=counts[0],
        window=None,
        counted=PromptCounts(tokenizer="smol", counts=counts, max_model_len=2048),
    )
    assert (window.counted_by, window.tokenizer, window.count_note) == ("tokenizer", "smol", None)
    assert {s.name: s.tokens for s in window.sections} == expected
    assert window.total_tokens == window.reported_prompt_tokens
    assert window.window == 2048  # the engine's length, as the deployment states none


def test_counts_that_do_not_fit_the_probes_are_estimated_and_said_so() -> None:
    request: JsonObject = {"messages": [system("Be brief."), user("go")]}
    counted = PromptCounts(tokenizer="smol", counts=[12], max_model_len=2048)
    window = context_window("c", "vllm", "smol", request, 12, 4096, counted)
    assert window.counted_by == "estimate" and window.tokenizer is None
    assert window.count_note is not None and "1 counts for 3 prompts" in window.count_note
    assert window.window == 4096  # the deployment's stated window wins
    with pytest.raises(ValueError, match="counts for"):
        exact_tokens({"messages": []}, [])


def test_without_counts_the_estimate_carries_the_reason() -> None:
    request: JsonObject = {"messages": [user("x" * 40)]}
    window = context_window("c", "openai", "gpt", request, 15, None, None, "an openai model")
    assert (window.counted_by, window.count_note) == ("estimate", "an openai model")
    assert window.total_tokens == 12 + 4  # "user: " and 40 characters, 4 a token; the message's 4
    assert window.window is None
