"""Agent2Agent (A2A 1.0, the ``a2a-sdk`` types) for Wonder's agents: what maps to what (pure).

- an agent → an agent card (``card_of``): one skill, the JSON-RPC interface at the agent's own
  URL, streaming, a bearer API key as its security scheme;
- a message → one turn of the agent (``message_text``): its text parts joined (a data part as
  its JSON); the message's ``contextId`` → the conversation it continues;
- a task → that turn (``task_of``): its id is the turn's id, its ``contextId`` the conversation's;
  its state the turn's (``state_of``), its history the user's message and the agent's messages
  of the turn, its one artifact (``answer``) the agent's answer.

Nothing here does I/O: ``serving.gateway.a2a`` reads the store and runs the turns.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from core.domain import Agent, Turn, TurnStatus
from core.domain import Message as WonderMessage
from core.domain import MessageRole as WonderRole

ANSWER_ARTIFACT = "answer"
SECURITY_SCHEME = "wonderApiKey"
TEXT = "text/plain"
CANCEL_REASON = "cancelled by the A2A client"
# What a cancelled turn's failure reason is (this route's, and the REST route's default).
CANCEL_REASONS = frozenset({CANCEL_REASON, "cancelled"})
MAX_MESSAGE_CHARS = 100_000


class UnsupportedPart(ValueError):
    """A part Wonder cannot take as a message (a file by bytes or URL)."""


def agent_url(base_url: str, agent_id: str) -> str:
    """The agent's A2A endpoint (JSON-RPC): its card is under it at the well-known path."""
    return f"{base_url.rstrip('/')}/a2a/agents/{agent_id}"


def card_of(agent: Agent, base_url: str, version: str) -> AgentCard:
    """The agent's card: what it is, where it answers, and how to authenticate."""
    persona = agent.persona_ref.id if agent.persona_ref else "an inline persona"
    description = (
        f"The Wonder agent {agent.name!r} ({persona}): each message is one turn of the agent, "
        "with its tools and memory; a task's contextId is its conversation."
    )
    return AgentCard(
        name=agent.name,
        description=description,
        supported_interfaces=[
            AgentInterface(
                url=agent_url(base_url, agent.id),
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
        ],
        version=version,
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=False
        ),
        security_schemes={
            SECURITY_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="A Wonder API key (X-Wonder-User: acting user)"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
        default_input_modes=[TEXT, "application/json"],
        default_output_modes=[TEXT],
        skills=[
            AgentSkill(
                id=agent.id,
                name=agent.name,
                description=f"Send a message to {agent.name}; the answer is its reply.",
                tags=["wonder", "agent"],
            )
        ],
    )


def card_json(card: AgentCard) -> dict[str, Any]:
    card_dict: dict[str, Any] = MessageToDict(card, preserving_proto_field_name=False)
    return card_dict


def message_text(message: Message) -> str:
    """A message's parts as the turn's text: text parts as they are, a data part as its JSON;
    ``UnsupportedPart`` for a file (bytes or a URL), ``ValueError`` when nothing is left."""
    texts: list[str] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data)))
        else:
            raise UnsupportedPart(f"a {kind or 'empty'} part: only text and data parts are taken")
    text = "\n\n".join(t for t in texts if t.strip())
    if not text.strip():
        raise ValueError("the message has no text")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValueError(f"the message is longer than {MAX_MESSAGE_CHARS} characters")
    return text


def state_of(turn: Turn) -> TaskState:
    """A turn's status as a task's state."""
    if turn.status == TurnStatus.COMPLETED:
        return TaskState.TASK_STATE_COMPLETED
    if turn.status == TurnStatus.FAILED:
        if turn.failure_reason in CANCEL_REASONS:
            return TaskState.TASK_STATE_CANCELED
        return TaskState.TASK_STATE_FAILED
    return TaskState.TASK_STATE_WORKING


TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def _timestamp(at: datetime | None) -> Timestamp:
    stamp = Timestamp()
    if at is not None:
        stamp.FromDatetime(at)
    return stamp


def text_message(message_id: str, role: Role, text: str, context_id: str, task_id: str) -> Message:
    return Message(
        message_id=message_id,
        context_id=context_id,
        task_id=task_id,
        role=role,
        parts=[Part(text=text, media_type=TEXT)],
    )


def history_of(messages: list[WonderMessage], turn: Turn) -> list[Message]:
    """The turn's messages as a task's history: the user's message, then the agent's."""
    role = {WonderRole.USER: Role.ROLE_USER, WonderRole.AGENT: Role.ROLE_AGENT}
    return [
        text_message(m.id, role[m.role], m.content, turn.conversation_id, turn.id)
        for m in messages
        if m.turn_id == turn.id and m.role in role
    ]


def answer_artifact(text: str) -> Artifact:
    return Artifact(
        artifact_id=ANSWER_ARTIFACT,
        name="answer",
        description="The agent's messages of the turn",
        parts=[Part(text=text, media_type=TEXT)],
    )


def status_of(
    state: TaskState,
    context_id: str,
    task_id: str,
    at: datetime | None = None,
    note: str | None = None,
) -> TaskStatus:
    """A task's status; ``note`` (a failure's reason, a tool call) as an agent message."""
    message = None
    if note:
        message = text_message(f"{task_id}-status", Role.ROLE_AGENT, note, context_id, task_id)
    return TaskStatus(state=state, message=message, timestamp=_timestamp(at))


def task_of(turn: Turn, messages: list[WonderMessage], history_length: int | None = None) -> Task:
    """A turn as a task (``history_length``: only that many of the latest messages)."""
    state = state_of(turn)
    history = history_of(messages, turn)
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length else []
    answer = "\n\n".join(
        m.content for m in messages if m.turn_id == turn.id and m.role == WonderRole.AGENT
    )
    note = turn.failure_reason if state != TaskState.TASK_STATE_COMPLETED else None
    at = turn.completed_at or turn.started_at or turn.created_at
    return Task(
        id=turn.id,
        context_id=turn.conversation_id,
        status=status_of(state, turn.conversation_id, turn.id, at, note),
        history=history,
        artifacts=[answer_artifact(answer)] if state in TERMINAL and answer else [],
    )


def started_task(task_id: str, context_id: str, message: Message, at: datetime) -> Task:
    """A task just accepted: working, with the caller's message as its history."""
    sent = Message()
    sent.CopyFrom(message)
    sent.task_id, sent.context_id = task_id, context_id
    return Task(
        id=task_id,
        context_id=context_id,
        status=status_of(TaskState.TASK_STATE_WORKING, context_id, task_id, at),
        history=[sent],
    )


def artifact_chunk(
    task_id: str, context_id: str, text: str, append: bool, last: bool
) -> TaskArtifactUpdateEvent:
    """A piece of the answer as it is written (``append``: after the pieces already sent)."""
    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=context_id,
        artifact=answer_artifact(text),
        append=append,
        last_chunk=last,
    )


def status_update(
    task_id: str,
    context_id: str,
    state: TaskState,
    at: datetime,
    note: str | None = None,
) -> TaskStatusUpdateEvent:
    status = status_of(state, context_id, task_id, at, note)
    return TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
