"""What maps to what between A2A and Wonder (serving.gateway.a2a_protocol): pure rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from a2a.types.a2a_pb2 import Message, Part, Role, TaskState
from google.protobuf.struct_pb2 import Value

from core.domain import Agent, MessageRole, PersonaRef, Turn, TurnStatus, UserCaller
from core.domain import Message as WonderMessage
from serving.gateway.a2a_protocol import (
    CANCEL_REASON,
    UnsupportedPart,
    card_of,
    message_text,
    state_of,
    task_of,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def turn(status: TurnStatus = TurnStatus.COMPLETED, reason: str | None = None) -> Turn:
    return Turn(
        id="turn_1",
        conversation_id="conv_1",
        agent_id="agent_1",
        caller=UserCaller(user_id="u"),
        input="hi",
        status=status,
        failure_reason=reason,
        created_at=AT,
    )


def said(message_id: str, role: MessageRole, text: str, turn_id: str = "turn_1") -> WonderMessage:
    return WonderMessage(
        id=message_id,
        conversation_id="conv_1",
        turn_id=turn_id,
        role=role,
        author="x",
        content=text,
        created_at=AT,
    )


def test_a_card_names_the_agents_endpoint_and_its_key() -> None:
    agent = Agent(
        id="agent_1", client_id="c", name="helper", persona_ref=PersonaRef(id="p"), created_at=AT
    )
    card = card_of(agent, "http://wonder.example/", "1.2.3")
    assert card.supported_interfaces[0].url == "http://wonder.example/a2a/agents/agent_1"
    assert card.supported_interfaces[0].protocol_binding == "JSONRPC"
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    (name,) = card.security_requirements[0].schemes.keys()
    scheme = card.security_schemes[name]
    assert scheme.http_auth_security_scheme.scheme == "Bearer"
    assert [s.id for s in card.skills] == ["agent_1"]


def test_message_parts_as_a_turns_text() -> None:
    data = Value()
    data.struct_value.update({"k": 1})
    message = Message(parts=[Part(text="hello"), Part(data=data)])
    assert message_text(message) == 'hello\n\n{"k": 1.0}'
    with pytest.raises(UnsupportedPart):
        message_text(Message(parts=[Part(url="https://example.com/f.pdf")]))
    with pytest.raises(ValueError, match="no text"):
        message_text(Message(parts=[Part(text="  ")]))
    with pytest.raises(ValueError, match="longer"):
        message_text(Message(parts=[Part(text="x" * 100_001)]))


@pytest.mark.parametrize(
    ("status", "reason", "state"),
    [
        (TurnStatus.ACTIVE, None, TaskState.TASK_STATE_WORKING),
        (TurnStatus.COMPLETED, None, TaskState.TASK_STATE_COMPLETED),
        (TurnStatus.FAILED, "the model failed", TaskState.TASK_STATE_FAILED),
        (TurnStatus.FAILED, CANCEL_REASON, TaskState.TASK_STATE_CANCELED),
        (TurnStatus.FAILED, "cancelled", TaskState.TASK_STATE_CANCELED),
    ],
)
def test_turn_states(status: TurnStatus, reason: str | None, state: TaskState) -> None:
    assert state_of(turn(status, reason)) == state


def test_a_task_holds_its_turns_messages_only() -> None:
    messages = [
        said("m0", MessageRole.USER, "earlier", turn_id="turn_0"),
        said("m1", MessageRole.USER, "hi"),
        said("m2", MessageRole.AGENT, "one"),
        said("m3", MessageRole.AGENT, "two"),
        said("m4", MessageRole.SYSTEM, "a note"),
    ]
    task = task_of(turn(), messages)
    assert task.id == "turn_1" and task.context_id == "conv_1"
    assert [m.message_id for m in task.history] == ["m1", "m2", "m3"]
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT, Role.ROLE_AGENT]
    assert task.artifacts[0].parts[0].text == "one\n\ntwo"
    assert [m.message_id for m in task_of(turn(), messages, 1).history] == ["m3"]
    assert list(task_of(turn(), messages, 0).history) == []
    failed = task_of(turn(TurnStatus.FAILED, "boom"), messages)
    assert failed.status.message.parts[0].text == "boom"
    running = task_of(turn(TurnStatus.ACTIVE), messages[:2])
    assert running.status.state == TaskState.TASK_STATE_WORKING and not running.artifacts
