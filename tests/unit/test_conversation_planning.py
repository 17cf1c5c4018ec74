"""The Conversation's planning as tables: (progress, event) → decisions. No Ray, no store."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from actors.conversation import planning
from actors.conversation.domain import (
    AppendAgentMessage,
    CallModel,
    CompleteTurn,
    DispatchTool,
    ModelAnswered,
    ReturnToolError,
    ToolCatalog,
    ToolsReturned,
    TurnProgress,
)
from core.domain import (
    Constraints,
    Message,
    MessageRole,
    ModelProfile,
    Persona,
    Tool,
    ToolResult,
)
from core.llm.protocol import ToolCallRequested

NOW = datetime(2026, 1, 1, tzinfo=UTC)

SEARCH = Tool(
    id="t-search",
    name="search",
    description="search things",
    input_schema={
        "type": "object",
        "properties": {"q": {"type": "string", "maxLength": 20}},
        "required": ["q"],
        "additionalProperties": False,
    },
    target_type="task",
    target_id="task-search",
)
MAPPED = Tool(
    id="t-mapped",
    name="mapped",
    description="mapped input",
    input_schema={"type": "object", "properties": {"topic": {"type": "object"}}},
    target_type="task",
    target_id="task-m",
    input_mapping={"query": "$.topic.name", "mode": "fast"},
)
ASK = Tool(
    id="t-ask",
    name="ask_expert",
    description="ask",
    input_schema={"type": "object"},
    target_type="agent",
    target_id="agent-expert",
)
CATALOG = planning.build_catalog(
    Persona(
        id="p",
        system_prompt="x",
        constraints=Constraints(deny=["mapped_denied"], allowed_agents=["agent-other"]),
    ),
    [SEARCH, MAPPED, ASK, SEARCH.model_copy(update={"name": "mapped_denied"})],
)


def call(name: str, arguments: object) -> ToolCallRequested:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallRequested(id=f"c-{name}", name=name, arguments=text)


@pytest.mark.parametrize(
    ("tool_call", "expected_code", "fragment"),
    [
        (call("nope", {}), "NOT_FOUND", "no tool named 'nope'"),
        (call("mapped_denied", {"q": "x"}), "PERMISSION_DENIED", "not allowed"),
        (call("search", "{not json"), "INVALID_INPUT", "not valid JSON"),
        (call("search", {}), "INVALID_INPUT", "'q' is a required property"),
        (call("search", {"q": "x" * 30}), "INVALID_INPUT", "at q"),
        (call("search", {"q": "a", "extra": 1}), "INVALID_INPUT", "Additional properties"),
        (call("ask_expert", {}), "PERMISSION_DENIED", "allowed agents"),
    ],
)
def test_bad_tool_calls_become_error_results(
    tool_call: ToolCallRequested, expected_code: str, fragment: str
) -> None:
    [decision] = planning.plan_after_model(ModelAnswered("", (tool_call,)), CATALOG)
    assert isinstance(decision, ReturnToolError)
    assert decision.result.error is not None
    assert decision.result.error.code == expected_code
    assert fragment in decision.result.error.message
    assert decision.result.tool_call_id == tool_call.id


@pytest.mark.parametrize(
    ("tool_call", "expected_input"),
    [
        (call("search", {"q": "cats"}), {"q": "cats"}),
        (call("mapped", {"topic": {"name": "dogs"}}), {"query": "dogs", "mode": "fast"}),
        (call("mapped", {}), {"query": None, "mode": "fast"}),
    ],
)
def test_valid_tool_calls_are_dispatched_with_mapped_input(
    tool_call: ToolCallRequested, expected_input: dict[str, object]
) -> None:
    [decision] = planning.plan_after_model(ModelAnswered("", (tool_call,)), CATALOG)
    assert isinstance(decision, DispatchTool)
    assert decision.input == expected_input


def test_a_plain_answer_appends_a_message_and_completes() -> None:
    decisions = planning.plan(TurnProgress("t"), ModelAnswered("hello"), CATALOG, 8)
    assert decisions == [AppendAgentMessage("hello"), CompleteTurn()]


@pytest.mark.parametrize(
    ("moves_made", "max_moves", "tools_allowed"),
    [(0, 8, True), (6, 8, True), (7, 8, False), (0, 1, False)],
)
def test_the_move_budget_takes_tools_away(
    moves_made: int, max_moves: int, tools_allowed: bool
) -> None:
    c = call("search", {"q": "x"})
    result = ToolResult(tool_call_id=c.id, success=True, result={"hits": 1})
    [step] = planning.plan(
        TurnProgress("t", moves_made), ToolsReturned((c,), (result,)), CATALOG, max_moves
    )
    assert isinstance(step, CallModel)
    assert step.tools_allowed is tools_allowed
    assert step.transcript[0]["tool_calls"][0]["id"] == c.id
    assert step.transcript[1] == {"role": "tool", "tool_call_id": c.id, "content": '{"hits": 1}'}


def test_a_spent_budget_removes_tools_from_the_request() -> None:
    profile = ModelProfile(id="m")
    persona = Persona(id="p", system_prompt="be brief")
    base = planning.assemble_context(persona, profile, [], CATALOG, "a")
    request = planning.request_for_step(base, CallModel(transcript=(), tools_allowed=False))
    assert request.tools == []
    assert request.messages[-1]["content"] == planning.MUST_ANSWER_NOTE


def _message(n: int, role: MessageRole, author: str, content: str) -> Message:
    return Message(
        id=f"m{n}",
        conversation_id="c",
        turn_id=f"t{n}",
        role=role,
        author=author,
        content=content,
        created_at=NOW,
    )


def test_context_has_system_prompt_history_and_tool_specs() -> None:
    persona = Persona(id="p", system_prompt="You help.")
    history = [
        _message(1, MessageRole.USER, "u", "hi"),
        _message(2, MessageRole.AGENT, "a", "hello"),
        _message(3, MessageRole.AGENT, "other", "I am another agent"),
        _message(4, MessageRole.USER, "u", "now?"),
    ]
    request = planning.assemble_context(
        persona, ModelProfile(id="m", max_tokens=9), history, CATALOG, "a", "Memories: x"
    )
    assert request.messages == [
        {"role": "system", "content": "You help.\n\nMemories: x"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "[other] I am another agent"},
        {"role": "user", "content": "now?"},
    ]
    assert {t.name for t in request.tools} == {"search", "mapped", "ask_expert"}
    assert request.max_tokens == 9


@pytest.mark.parametrize(
    ("turns", "current", "limit", "expected"),
    [
        (["t1", "t2", "t3", "t4"], "t4", 2, ["t2", "t3", "t4"]),
        (["t1", "t2", "t3", "t4"], "t4", 0, ["t4"]),
        (["t1", "t2", "t3", "t4"], "t2", 5, ["t1", "t2"]),
        (["t4"], "t4", 20, ["t4"]),
    ],
)
def test_recent_turns(turns: list[str], current: str, limit: int, expected: list[str]) -> None:
    assert planning.recent_turn_ids(turns, current, limit) == expected


def test_permissions_deny_wins_over_allow() -> None:
    catalog = ToolCatalog(by_name={"search": SEARCH}, allow=("search",), deny=("search",))
    assert not catalog.permitted("search")
    assert catalog.visible() == []


def test_planning_modules_import_no_io_libraries() -> None:
    code = (
        "import sys; import actors.conversation.planning, actors.conversation.domain;"
        "bad = [m for m in ('ray', 'lancedb', 'sqlalchemy', 'httpx') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_waiting_token_deltas_are_coalesced_per_turn() -> None:
    import asyncio

    from actors.conversation.actor import coalesce_tokens

    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for event in (
        {"type": "token", "turn_id": "t1", "delta": "b"},
        {"type": "token", "turn_id": "t1", "delta": "c"},
        {"type": "token", "turn_id": "t2", "delta": "x"},
        {"type": "message", "seq": 5},
    ):
        queue.put_nowait(event)
    merged, held = coalesce_tokens({"type": "token", "turn_id": "t1", "delta": "a"}, queue)
    assert merged["delta"] == "abc"
    assert held == {"type": "token", "turn_id": "t2", "delta": "x"}
    assert coalesce_tokens({"type": "message", "seq": 4}, queue) == (
        {"type": "message", "seq": 4},
        None,
    )
