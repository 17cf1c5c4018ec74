"""The context-assembly hook contract (``core.context_contract``), the loop's use of a hook's
request (``actors.conversation.context.request_from_hook``) and the library's adapters."""

from __future__ import annotations

from typing import Any

import pytest

from actors.conversation.context import openai_body, request_from_hook
from actors.conversation.domain import ToolCatalog
from core.context_contract import CONTEXT_CONTRACT, parse_hook_answer
from core.domain import Tool
from core.errors import InvalidInput
from core.llm.protocol import ChatRequest, ToolSpec
from library.adapters import adapter_openai, newest_first_with_index

DEFAULT = ChatRequest(
    messages=[
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "second answer"},
        {"role": "user", "content": "now this"},
    ],
    tools=[ToolSpec("calc", "Calculates.", {"type": "object"}), ToolSpec("web", "", {})],
    model="local-model",
    temperature=0.0,
    max_tokens=256,
    timeout_s=30.0,
    tool_calling="constrained",
)


def catalog() -> ToolCatalog:
    return ToolCatalog(by_name={"calc": Tool.model_construct(name="calc")})


def answer(**request: Any) -> dict[str, Any]:
    return {"contract": CONTEXT_CONTRACT, "request": request}


def test_a_request_answer_is_validated_and_sent_with_the_profiles_model() -> None:
    parsed = parse_hook_answer(
        answer(messages=[{"role": "system", "content": "ctx"}, {"role": "user", "content": "q"}])
    )
    assert parsed.request is not None
    sent = request_from_hook(parsed.request, DEFAULT, catalog())
    assert sent.messages == [
        {"role": "system", "content": "ctx"},
        {"role": "user", "content": "q"},
    ]
    assert (sent.model, sent.timeout_s, sent.tool_calling) == ("local-model", 30.0, "constrained")
    assert [t.name for t in sent.tools] == ["calc", "web"]  # no tools given: the persona's


def test_a_hook_may_narrow_the_tools_and_set_sampling() -> None:
    calc = {"type": "function", "function": {"name": "calc"}}
    parsed = parse_hook_answer(
        answer(messages=[{"role": "user", "content": "q"}], tools=[calc], temperature=0.7)
    )
    assert parsed.request is not None
    sent = request_from_hook(parsed.request, DEFAULT, catalog())
    assert [t.name for t in sent.tools] == ["calc"] and sent.tools[0].description == "Calculates."
    assert sent.temperature == 0.7 and sent.max_tokens == 256


def test_a_hook_cannot_offer_a_tool_the_persona_lacks() -> None:
    rogue = {"type": "function", "function": {"name": "shell"}}
    parsed = parse_hook_answer(answer(messages=[{"role": "user", "content": "q"}], tools=[rogue]))
    assert parsed.request is not None
    with pytest.raises(InvalidInput, match="does not have: \\['shell'\\]"):
        request_from_hook(parsed.request, DEFAULT, catalog())


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("just text", "answered str"),
        ({"request": {"messages": [{"role": "user", "content": "q"}]}}, "must say"),
        (answer(messages=[]), "messages"),
        (answer(messages=[{"role": "wizard", "content": "q"}]), "role"),
        (answer(messages=[{"role": "user", "content": "q"}], stream=True), "stream"),
        (answer(messages=[{"role": "user", "content": None}]), "every message is empty"),
    ],
    ids=["not-an-object", "no-contract", "no-messages", "bad-role", "unknown-key", "empty"],
)
def test_a_malformed_answer_says_what_is_wrong(raw: Any, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        parse_hook_answer(raw)


def test_the_legacy_system_context_answer_still_parses() -> None:
    parsed = parse_hook_answer({"system_context": "remembered things"})
    assert parsed.request is None and parsed.system_context == "remembered things"


def test_the_openai_adapter_adds_the_gathered_context_to_the_system_message() -> None:
    data = {"input": {"request": openai_body(DEFAULT)}, "previous": {"system_context": "Facts."}}
    out = adapter_openai(data)
    parsed = parse_hook_answer(out)
    assert parsed.request is not None
    messages = [m.model_dump(exclude_none=True) for m in parsed.request.messages]
    assert messages[0] == {"role": "system", "content": "You help.\n\nFacts."}
    assert messages[1:] == DEFAULT.messages[1:]
    assert [t.function.name for t in parsed.request.tools or []] == ["calc", "web"]


def test_a_library_hook_can_reorder_history_and_add_an_index() -> None:
    out = newest_first_with_index({"input": {"request": openai_body(DEFAULT)}})
    parsed = parse_hook_answer(out)
    assert parsed.request is not None
    contents = [m.content for m in parsed.request.messages]
    assert contents[0] == (
        "You help.\n\nIndex of earlier questions:\n1. first question\n2. second question"
    )
    assert contents[1:] == [
        "second question",
        "second answer",
        "first question",
        "first answer",
        "now this",
    ]


def test_a_persona_has_one_context_hook_a_task_or_a_workflow() -> None:
    from pydantic import ValidationError

    from core.domain import Persona

    assert Persona(id="p", system_prompt="x", context_assembly_workflow="wf").context_hook == "wf"
    with pytest.raises(ValidationError, match="exclusive"):
        Persona(
            id="p", system_prompt="x", context_assembly_task_id="t", context_assembly_workflow="w"
        )
