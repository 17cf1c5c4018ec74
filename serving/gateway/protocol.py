"""Wire models: the JSON bodies the gateway accepts and returns (REST and WebSocket).

Requests reject unknown fields (a typo fails loudly with its field path). Responses reuse the domain
models of ``core.domain`` where the stored shape is the public one; envelopes and inputs live here.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

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
from core.jsontypes import JsonObject
from core.memory_policy import MemoryUpkeepPolicy
from core.route_model import MessagePermissions
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


class OneOfFields(WireModel):
    """A body naming exactly one of the optional fields ``one_of`` (the others left out).

    The OpenAPI schema says so (``oneOf`` of ``required``, the fields not nullable), so a
    generated valid body is one the server accepts; an explicit ``null`` is refused as the
    schema refuses it (422 naming the field).
    """

    one_of: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = [name for name in cls.one_of if name in data and data[name] is None]
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: leave it out rather than null")
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> OneOfFields:
        if sum(getattr(self, name) is not None for name in self.one_of) != 1:
            *others, last = self.one_of
            raise ValueError(f"give exactly one of {', '.join(others)} or {last}")
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # One complete object schema per choice (the common fields, and that one field, not
        # nullable): a oneOf that generators and validators read alike.
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        properties = target.pop("properties", {})
        required = target.pop("required", [])
        target.pop("additionalProperties", None)  # each choice says it
        common = {k: v for k, v in properties.items() if k not in cls.one_of}
        target["oneOf"] = [
            {
                "type": "object",
                "properties": {**common, name: not_nullable(properties[name])},
                "required": [*required, name],
                "additionalProperties": False,
            }
            for name in cls.one_of
        ]
        return schema


def not_nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """One property's JSON schema without ``null`` (nor a ``null`` default)."""
    prop = dict(prop)
    options = [o for o in prop.pop("anyOf", []) if o != {"type": "null"}]
    if len(options) == 1:
        prop.update(options[0])
    elif options:
        prop["anyOf"] = options
    if prop.get("default", ...) is None:
        del prop["default"]
    return prop


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


class AgentCreate(OneOfFields):
    """Exactly one of ``persona_ref`` (a library persona) or ``persona`` (inline)."""

    one_of = ("persona_ref", "persona")

    name: str = Field(min_length=1, max_length=200)
    persona_ref: PersonaRefIn | None = None
    persona: Persona | None = None
    project_ids: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=64
    )
    memory_upkeep: MemoryUpkeepPolicy | None = Field(
        None, description="The agent's own memory upkeep, over its persona's"
    )


AgentList = Items[Agent]


# --------------------------------------------------------------------------- conversations


class ConversationCreate(WireModel):
    """A conversation works on a project through its agent: ``project_id`` needs ``agent_id``."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["project_id"], "properties": {"project_id": {"type": "string"}}},
            "then": {"required": ["agent_id"], "properties": {"agent_id": {"type": "string"}}},
        }
    )

    agent_id: str | None = Field(None, max_length=64, description="The agent that answers")
    title: str | None = Field(None, max_length=200)
    project_id: str | None = Field(
        None,
        max_length=64,
        description="The agent's project to work on (default: its only project, if it has one)",
    )

    @model_validator(mode="after")
    def _project_through_agent(self) -> ConversationCreate:
        if self.project_id is not None and self.agent_id is None:
            raise ValueError("project_id: a conversation works on a project through its agent")
        return self


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
    permissions: MessagePermissions | None = Field(
        None,
        description="Narrows what this message's turn may do: tools.allow / tools.deny take "
        "tools away from the persona's, never add any",
    )


class RouteTarget(OneOfFields):
    """Exactly one: a thread (turn id), a session label, or a persona (its main session)."""

    one_of: ClassVar[tuple[str, ...]] = ("thread", "session", "persona")

    thread: str | None = Field(
        None, max_length=64, description="Turn id: append at the tip, otherwise fork from it"
    )
    session: str | None = Field(None, pattern=LABEL_PATTERN)
    persona: str | None = Field(None, max_length=128, description="Its main session <persona>:main")

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


class ApprovalDecision(WireModel):
    """A person's decision on a tool call waiting for approval (``POST …/approvals/{id}``)."""

    decision: Literal["approve", "deny", "edit"] = Field(
        description="approve (run as the model asked), edit (run with `arguments`), deny"
    )
    arguments: JsonObject | None = Field(
        None, description="With `edit` only: the arguments to run with (the tool's schema holds)"
    )
    reason: str | None = Field(
        None, min_length=1, max_length=500, description="Why (a denial's reason, the model hears)"
    )

    @model_validator(mode="after")
    def _arguments_with_edit(self) -> ApprovalDecision:
        if self.decision == "edit" and self.arguments is None:
            raise ValueError("an edit gives the call's new `arguments`")
        if self.decision != "edit" and self.arguments is not None:
            raise ValueError("`arguments` go with an edit only")
        return self

    def decided(self) -> ApprovalDecision:
        """The decision, without the frame's own fields."""
        return ApprovalDecision.model_validate(
            self.model_dump(include={"decision", "arguments", "reason"}, exclude_none=True)
        )


class ClientApprovalFrame(ApprovalDecision):
    """An ``approval`` frame: decide a waiting tool call (the body of
    ``POST …/approvals/{approval_id}``), answered by an ``approval.ack`` frame."""

    type: Literal["approval"]
    approval_id: str = Field(min_length=1, max_length=200)
    id: str | None = Field(None, max_length=100, description="Echoed back in the ack or error")


AnyClientFrame = ClientMessageFrame | ClientPingFrame | ClientApprovalFrame
ClientFrame = Annotated[AnyClientFrame, Field(discriminator="type")]
CLIENT_FRAME: TypeAdapter[AnyClientFrame] = TypeAdapter(ClientFrame)
