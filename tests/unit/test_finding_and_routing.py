"""The pure parts of message search, turn filters, smart routing's decision, a message's
permissions override and per-turn thinking (no Ray; the override checks on a real SQLite store)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from actors.conversation.domain import ToolCatalog
from actors.conversation.tool_calls import narrowed
from core.domain import (
    ModelProfile,
    ThinkingConfig,
    Tool,
    Turn,
    TurnIssues,
    TurnStatus,
    UserCaller,
)
from core.errors import InvalidInput
from core.llm.constrained import native_body, reply_body
from core.llm.protocol import ChatRequest
from core.message_search import most_similar, query_terms, text_score, vector_bytes
from core.model_override import check_override, overridden_profile, used
from core.route_model import RouteCandidate, ToolPermissions
from core.smart_routing import decide
from core.store import Store
from core.thinking import thinking_body
from core.turn_filters import TurnFilter, select_turns
from core.turn_model import ModelOverride

AT = datetime(2026, 3, 1, tzinfo=UTC)


def test_text_search_needs_every_term_case_insensitively() -> None:
    terms = query_terms("PostgreSQL  ledger postgresql")
    assert terms == ("postgresql", "ledger")
    assert text_score("We picked PostgreSQL for the Ledger; postgresql it is.", terms) == 3
    assert text_score("We picked PostgreSQL.", terms) is None
    for bad in ("", "   ", " ".join(f"t{i}" for i in range(17)), "x" * 501):
        with pytest.raises(InvalidInput, match="q:"):
            query_terms(bad)


def test_most_similar_ranks_by_cosine_and_skips_other_dimensions() -> None:
    stored = [vector_bytes([1.0, 0.0]), vector_bytes([0.6, 0.8]), vector_bytes([1.0, 0.0, 0.0])]
    ranked = most_similar([2.0, 0.1], stored, 5)
    assert [r.index for r in ranked] == [0, 1]
    assert ranked[0].score == pytest.approx(0.99875, abs=1e-4)
    assert most_similar([1.0, 0.0], [], 3) == []


def _turn(turn_id: str, status: TurnStatus = TurnStatus.COMPLETED, failures: int = 0) -> Turn:
    return Turn(
        id=turn_id,
        conversation_id="c",
        agent_id="a",
        caller=UserCaller(user_id="u"),
        input="x",
        status=status,
        issues=TurnIssues(tool_failures=failures),
        created_at=AT,
    )


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (TurnFilter(), ["t1", "t2", "t3", "t4"]),
        (TurnFilter(tool="lookup"), ["t2", "t3"]),
        (TurnFilter(tool="lookup", failed=True), ["t3"]),
        (TurnFilter(failed=True), ["t3", "t4"]),
        (TurnFilter(failed=False), ["t1", "t2"]),
        (TurnFilter(status=TurnStatus.FAILED), ["t4"]),
        (TurnFilter(turn_ids=frozenset({"t1", "t9"})), ["t1"]),
        (TurnFilter(turn_ids=frozenset()), []),
    ],
)
def test_turn_filters(where: TurnFilter, expected: list[str]) -> None:
    turns = [
        _turn("t1"),
        _turn("t2"),
        _turn("t3", failures=1),
        _turn("t4", TurnStatus.FAILED),
    ]
    tools = {"t2": {"lookup"}, "t3": {"lookup", "read_plan"}}
    assert [t.id for t in select_turns(turns, tools, where)] == expected


def _candidate(conversation_id: str, score: float) -> RouteCandidate:
    return RouteCandidate(conversation_id=conversation_id, turn_id=None, score=score)


def test_smart_routing_takes_the_best_candidate_over_the_bar_or_none() -> None:
    scored = [_candidate("a", 0.7), _candidate("b", 0.4)]
    decision = decide(scored, 0.5)
    assert decision.chosen == scored[0] and not decision.fallback
    assert decision.candidates == scored
    below = decide(scored, 0.8)
    assert below.chosen is None and below.fallback and below.candidates == scored
    assert decide([], 0.1).chosen is None


def _catalog(allow: tuple[str, ...] | None = None, deny: tuple[str, ...] = ()) -> ToolCatalog:
    tools = {
        name: Tool(id=name, name=name, description=name, target_type="task", target_id=name)
        for name in ("lookup", "read_plan", "shell")
    }
    return ToolCatalog(by_name=tools, allow=allow, deny=deny)


def test_a_permissions_override_only_takes_tools_away() -> None:
    only = narrowed(_catalog(), ToolPermissions(allow=["lookup", "secret"]))
    assert [t.name for t in only.visible()] == ["lookup"]  # "secret" is not the persona's
    persona_limited = narrowed(_catalog(allow=("read_plan",)), ToolPermissions(allow=["lookup"]))
    assert persona_limited.visible() == []  # cannot widen the persona's allow list
    denied = narrowed(_catalog(deny=("shell",)), ToolPermissions(deny=["lookup"]))
    assert [t.name for t in denied.visible()] == ["read_plan"]
    assert not denied.permitted("shell") and not denied.permitted("lookup")


def _profile(profile_id: str, thinking: str = "none", **fields: object) -> ModelProfile:
    return ModelProfile.model_validate(
        {"id": profile_id, "provider": "scripted", "thinking": thinking, **fields}
    )


def test_thinking_is_refused_where_the_model_cannot_think(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    plain = store.model_profiles.put(_profile("plain"), AT)
    thinker = store.model_profiles.put(_profile("thinker", "reasoning_effort"), AT)
    think = ModelOverride(thinking=ThinkingConfig(effort="high"))
    with pytest.raises(InvalidInput, match=r"model profile plain .* does not support thinking"):
        check_override(store, think, "client", plain)
    with pytest.raises(InvalidInput, match="no agent whose model could think"):
        check_override(store, think, "client", None)
    check_override(store, think, "client", thinker)  # its own
    named = ModelOverride(model_profile_id="thinker", thinking=ThinkingConfig())
    check_override(store, named, "client", plain)  # the profile it names thinks
    off = ModelOverride(thinking=ThinkingConfig(enabled=False))
    check_override(store, off, "client", plain)  # asking not to think is always fine
    chosen = overridden_profile(store, thinker, think, "client")
    assert used(chosen).thinking == ThinkingConfig(effort="high")
    with pytest.raises(ValidationError, match="thinking_config needs a thinking mode"):
        _profile("bad", thinking_config={"effort": "low"})


def test_thinking_reaches_the_request_body_in_the_models_own_terms() -> None:
    template = _profile("t", "chat_template", thinking_config={"enabled": True})
    effort = _profile("e", "reasoning_effort", thinking_config={"effort": "low"})
    assert thinking_body(template) == {"chat_template_kwargs": {"enable_thinking": True}}
    assert thinking_body(effort) == {"reasoning_effort": "low"}
    assert thinking_body(_profile("n")) == {}
    quiet = _profile("q", "reasoning_effort", thinking_config={"enabled": False})
    assert thinking_body(quiet) == {}
    request = ChatRequest(
        messages=[{"role": "user", "content": "hi"}], reasoning=thinking_body(effort)
    )
    assert native_body(request)["reasoning_effort"] == "low"
    assert reply_body(request)["reasoning_effort"] == "low"
    assert "reasoning_effort" not in native_body(ChatRequest(messages=[]))
