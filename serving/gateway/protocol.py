"""Wire models: the JSON bodies the gateway accepts and returns (REST and WebSocket).

Requests reject unknown fields (a typo fails loudly with its field path). Responses reuse the domain
models of ``core.domain`` where the stored shape is the public one; envelopes and inputs live here.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from core.domain import (
    NAME_PATTERN,
    Agent,
    LibraryId,
    ModelProfile,
    Move,
    Persona,
    TaskDef,
    Tool,
    Turn,
)
from core.routes import Route
from core.strict import StrictScalars
from core.turn_model import ModelOverride, TurnModel
from core.workflows import WorkflowDef

T = TypeVar("T")

USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$"
MAX_MESSAGE_CHARS = 100_000


class WireModel(StrictScalars):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- envelopes


class ErrorBody(WireModel):
    code: str = Field(description="Stable error code, e.g. NOT_FOUND, INVALID_INPUT")
    message: str
    retriable: bool = Field(description="True when the same request may succeed later")
    details: list[dict[str, Any]] | None = Field(
        None, description="Per-field problems of a rejected body: path and message"
    )


class ErrorResponse(WireModel):
    error: ErrorBody


class Items(WireModel, Generic[T]):
    items: list[T]


class Page(WireModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(None, description="Pass as after_cursor for the next page")


class Health(WireModel):
    status: Literal["ok"] = "ok"


# --------------------------------------------------------------------------- library bodies
# A PUT body is the library object without its id (taken from the path); ``id`` and ``version`` may
# be sent back as read (a GET → edit → PUT round trip) and are checked / ignored.


class PersonaBody(Persona):
    id: LibraryId | None = None  # type: ignore[assignment]
    version: int | None = None  # type: ignore[assignment]


class ModelProfileBody(ModelProfile):
    id: LibraryId | None = None  # type: ignore[assignment]
    version: int | None = None  # type: ignore[assignment]


class ToolBody(Tool):
    id: LibraryId | None = None  # type: ignore[assignment]
    version: int | None = None  # type: ignore[assignment]


class TaskBody(TaskDef):
    id: LibraryId | None = None  # type: ignore[assignment]
    version: int | None = None  # type: ignore[assignment]


class WorkflowBody(WorkflowDef):
    id: LibraryId | None = None  # type: ignore[assignment]
    version: int | None = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- agents


class PersonaRefIn(WireModel):
    id: Annotated[str, Field(pattern=NAME_PATTERN)]
    version: int | None = Field(None, ge=1, description="Omit to follow the latest version")
    owner: str | None = Field(
        None,
        max_length=64,
        description="Whose persona: 'system' or your client id (default: yours, else the "
        "system's); stored on the agent, so its 'latest' follows only that library",
    )


class AgentCreate(WireModel):
    """Exactly one of ``persona_ref`` (a library persona) or ``persona`` (inline)."""

    name: str = Field(min_length=1, max_length=200)
    persona_ref: PersonaRefIn | None = None
    persona: Persona | None = None
    project_ids: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=64
    )

    @model_validator(mode="after")
    def _one_persona(self) -> AgentCreate:
        if (self.persona_ref is None) == (self.persona is None):
            raise ValueError("give exactly one of persona_ref or persona")
        return self


AgentList = Items[Agent]


# --------------------------------------------------------------------------- conversations


class ConversationCreate(WireModel):
    agent_id: str | None = Field(None, max_length=64, description="The agent that answers")
    title: str | None = Field(None, max_length=200)
    project_id: str | None = Field(
        None,
        max_length=64,
        description="The agent's project to work on (default: its only project, if it has one)",
    )


class Deleted(WireModel):
    deleted: list[str] = Field(description="Ids of the conversation and the children it started")


ClientSource = Literal["human", "trigger", "webhook", "cron", "event"]
"""What a client may say started a message (seed 004); never ``agent``: only agents' own turns."""

SOURCE_TEXT = "Who or what initiated the message; 'agent' is reserved to agents"


class MessageCreate(WireModel):
    content: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    source: ClientSource = Field("human", description=SOURCE_TEXT)
    model: ModelOverride | None = Field(
        None, description="This turn's model: another library profile, temperature, max tokens"
    )
    user_id: str | None = Field(
        None, pattern=USER_ID_PATTERN, description="Your app's user; default: the API client"
    )
    reply_to_message_id: str | None = Field(None, max_length=64)


class RouteTarget(WireModel):
    """Exactly one: a thread (turn id), a session label, or a persona (its main session)."""

    thread: str | None = Field(
        None, max_length=64, description="Turn id: append at the tip, otherwise fork from it"
    )
    session: str | None = Field(None, pattern=LABEL_PATTERN)
    persona: str | None = Field(None, max_length=128, description="Its main session <persona>:main")

    @model_validator(mode="after")
    def _one(self) -> RouteTarget:
        if sum(v is not None for v in (self.thread, self.session, self.persona)) != 1:
            raise ValueError("give exactly one of thread, session or persona")
        return self

    def as_route(self) -> Route:
        if self.thread is not None:
            return Route(kind="thread", target=self.thread)
        if self.session is not None:
            return Route(kind="session", target=self.session)
        assert self.persona is not None
        return Route(kind="persona", target=self.persona)


class MessageAccepted(WireModel):
    turn_id: str
    message_id: str
    seq: int | None = Field(None, description="The message's place in the conversation")


class TurnDetail(Turn):
    moves: list[Move]
    model: TurnModel | None = Field(
        None, description="The message's model override and the profile the turn used (if any)"
    )
    inherited_from: str | None = Field(
        None, description="For a fork: the conversation this inherited turn ran in"
    )


class EventOut(BaseModel):
    """A conversation event: ``seq`` (None for token deltas), ``type``, then its payload fields."""

    model_config = ConfigDict(extra="allow")

    seq: int | None
    type: str
    conversation_id: str | None = None
    at: str | None = None


# ------------------------------------------------------------------------ WebSocket client frames


class ClientMessageFrame(MessageCreate):
    """A ``message`` frame: the body of ``POST .../messages``, optionally routed by ``to`` as
    ``POST /v1/messages`` routes (docs/api.md, WebSocket)."""

    type: Literal["message"]
    to: RouteTarget | None = Field(
        None, description="Route the message (thread, session, persona) instead of posting here"
    )
    id: str | None = Field(None, max_length=100, description="Echoed back in the ack or error")

    def message(self) -> MessageCreate:
        """What it asks to post, without the frame's own fields."""
        return MessageCreate.model_validate(self.model_dump(exclude={"type", "to", "id"}))


class ClientPingFrame(WireModel):
    type: Literal["ping"]
    id: str | None = Field(None, max_length=100)


ClientFrame = Annotated[ClientMessageFrame | ClientPingFrame, Field(discriminator="type")]
CLIENT_FRAME: TypeAdapter[ClientMessageFrame | ClientPingFrame] = TypeAdapter(ClientFrame)
