"""The import plan of a conversation bundle, pure (``core.conversation_bundle``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
from pydantic import ValidationError

from core.conversation_bundle import (
    IMPORTED_USER,
    MAX_TURNS,
    ConversationBundle,
    IdMaker,
    bundle_of,
    check_bundle,
    plan_import,
)
from core.domain import (
    AgentCaller,
    Conversation,
    Message,
    MessageRole,
    Move,
    Participant,
    Turn,
    TurnStatus,
    UserCaller,
)
from core.errors import InvalidInput
from core.model_calls import CallSource, CallTimings, ModelCallRecord

T0 = datetime(2026, 1, 6, 10, 0, tzinfo=UTC)


def _ids() -> IdMaker:
    numbers = count(1)

    def make(prefix: str, earlier: str | None) -> str:
        made = f"{prefix}_new{next(numbers):04d}"
        assert earlier is None or made > earlier
        return made

    return make


def _bundle(turn_status: TurnStatus = TurnStatus.COMPLETED) -> ConversationBundle:
    conv = Conversation(
        id="conv_a",
        client_id="client_a",
        agent_id="agent_a",
        participants=[Participant(type="agent", id="agent_a"), Participant(type="agent", id="x")],
        title="plans",
        created_at=T0,
    )
    turns = [
        Turn(
            id=f"turn_{n}",
            conversation_id="conv_a",
            agent_id="agent_a",
            caller=UserCaller(user_id="ana")
            if n == 1
            else AgentCaller(agent_id="x", turn_id="t", conversation_id="c"),
            user_id="ana" if n == 1 else None,
            input=f"q{n}",
            status=turn_status if n == 2 else TurnStatus.COMPLETED,
            created_at=T0 + timedelta(minutes=n),
        )
        for n in (1, 2)
    ]
    messages = [
        Message(
            id=f"msg_{n}{role.value}",
            conversation_id="conv_a",
            turn_id=f"turn_{n}",
            role=role,
            author="ana" if role is MessageRole.USER else "agent_a",
            content=f"{role.value} {n}",
            seq=10 * n + (0 if role is MessageRole.USER else 5),
            created_at=T0,
        )
        for n in (1, 2)
        for role in (MessageRole.USER, MessageRole.AGENT)
    ]
    moves = [Move(id="move_1", turn_id="turn_2", sequence=1, reasoning="think", created_at=T0)]
    calls = [
        ModelCallRecord(
            id="call_1",
            source=CallSource(client_id="client_a", conversation_id="conv_a", turn_id="turn_1"),
            purpose="answer",
            provider="vllm",
            model="m",
            request={"messages": [{"role": "user", "content": "q1"}]},
            request_ref="model-calls/x/request.json",
            timings=CallTimings(started_at=T0, duration_s=0.1),
            trace_id="a" * 32,
            created_at=T0,
        )
    ]
    return bundle_of(conv, turns, messages, moves, calls, T0)


def test_every_id_is_new_and_the_log_numbers_the_messages() -> None:
    bundle = _bundle()
    check_bundle(bundle)
    plan = plan_import(
        bundle,
        client_id="client_b",
        conversation_id="conv_b",
        agent_id="agent_b",
        own_agents={"agent_b"},
        title=None,
        at=T0,
        ids=_ids(),
    )
    old_ids = {bundle.conversation.id, *(t.id for t in bundle.turns)}
    old_ids |= {m.id for m in bundle.messages} | {m.id for m in bundle.moves}
    new_ids = {plan.conversation.id, *(t.id for t in plan.turns)}
    new_ids |= {m.id for m in plan.messages} | {m.id for m in plan.moves}
    assert not old_ids & new_ids
    assert plan.conversation.client_id == "client_b" and plan.conversation.agent_id == "agent_b"
    assert [p.id for p in plan.conversation.participants] == ["agent_b"]  # x, agent_a: not b's
    assert plan.turn_ids == {"turn_1": plan.turns[0].id, "turn_2": plan.turns[1].id}
    assert all(t.agent_id == "agent_b" and t.conversation_id == "conv_b" for t in plan.turns)
    assert plan.turns[1].caller == UserCaller(user_id=IMPORTED_USER)  # an agent of the source
    assert [e.seq for e in plan.events] == list(range(1, len(plan.events) + 1))
    kinds = [e.type for e in plan.events]
    assert kinds == [
        "conversation_started",
        *("turn.started", "message", "message", "turn.completed"),
        *("turn.started", "message", "message", "move", "turn.completed"),
    ]
    by_seq = {e.seq: e for e in plan.events}
    for message in plan.messages:
        assert by_seq[message.seq].payload["message"]["id"] == message.id
    assert [m.content for m in plan.messages] == ["user 1", "agent 1", "user 2", "agent 2"]
    (call,) = plan.model_calls
    assert call.source.client_id == "client_b" and call.source.turn_id == plan.turns[0].id
    assert call.request_ref is None and call.trace_id is None and call.request is not None


def test_the_bundles_agent_is_kept_only_when_the_importer_owns_it() -> None:
    def primary(own: set[str]) -> str | None:
        plan = plan_import(
            _bundle(),
            client_id="client_b",
            conversation_id="conv_b",
            agent_id=None,
            own_agents=own,
            title="mine",
            at=T0,
            ids=_ids(),
        )
        assert plan.conversation.title == "mine"
        return plan.conversation.agent_id

    assert primary({"agent_a"}) == "agent_a"
    assert primary(set()) is None


def test_a_running_turn_is_not_exported() -> None:
    bundle = _bundle(TurnStatus.ACTIVE)
    assert [t.id for t in bundle.turns] == ["turn_1"]
    assert {m.turn_id for m in bundle.messages} == {"turn_1"} and bundle.moves == []


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda b: b.messages.append(b.messages[0]), "appears twice"),
        (lambda b: b.turns.append(b.turns[0]), "appears twice"),
        (
            lambda b: b.moves.append(b.moves[0].model_copy(update={"id": "m2", "turn_id": "t9"})),
            "moves[1]: names a turn",
        ),
        (
            lambda b: b.turns.__setitem__(
                0, b.turns[0].model_copy(update={"status": TurnStatus.ACTIVE})
            ),
            "still running",
        ),
        (
            lambda b: b.messages.__setitem__(
                0, b.messages[0].model_copy(update={"conversation_id": "conv_z"})
            ),
            "messages[0]: belongs to another conversation",
        ),
    ],
)
def test_an_inconsistent_bundle_names_its_first_fault(
    change: Callable[[ConversationBundle], object], fragment: str
) -> None:
    bundle = _bundle()
    change(bundle)
    with pytest.raises(InvalidInput, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        check_bundle(bundle)


def test_the_schema_bounds_a_bundle() -> None:
    data = _bundle().model_dump(mode="json")
    with pytest.raises(ValidationError):
        ConversationBundle.model_validate({**data, "format": "other/2"})
    with pytest.raises(ValidationError):
        ConversationBundle.model_validate({**data, "turns": data["turns"] * (MAX_TURNS // 2 + 1)})
    with pytest.raises(ValidationError):
        ConversationBundle.model_validate({**data, "unknown": 1})
