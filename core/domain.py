"""The data model of ARCHITECTURE.md §3 as pydantic models.

These are the shapes stored in the relational store and passed between actors. Library objects
(personas, model profiles, tools, tasks) are versioned; everything else is owned by a client.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from core.errors import ErrorCode, WonderError
from core.json_schemas import check_schema
from core.jsontypes import JsonObject
from core.memory_policy import MemoryUpkeepPolicy
from core.strict import StrictScalars
from core.tool_shortcuts import ShortcutError, check_pattern

TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # the name the model calls a tool by

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
SECRET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
LibraryId = Annotated[str, Field(pattern=NAME_PATTERN, description="Library object id")]


class Model(StrictScalars):
    """Base for stored models: unknown fields are rejected so typos fail loudly, and numbers
    and booleans are taken only as themselves (``core.strict``)."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- library objects


class ScriptedToolCall(Model):
    name: str
    arguments: JsonObject | str = Field(default_factory=dict)


class ScriptStep(Model):
    """One scripted model call: a reply (with ``{{last_user}}``, ``{{last_tool}}``, ``{{context}}``,
    ``{{history}}`` placeholders), tool calls, or a retryable failure. Test doubles only."""

    reply: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None
    fail: str | None = None
    delay_s: float = Field(0.0, ge=0.0, le=120.0, description="Wait before answering")
    match: str | None = Field(
        None, description="Rule-style: play this step when the last message contains this text"
    )


DEFAULT_MODEL = "default"
"""The model name every local model deployment answers to, whichever model it serves."""


class ModelPrices(Model):
    """What a model's tokens cost, for the estimated cost of its calls (docs/observability.md)."""

    input_per_million: float = Field(0.0, ge=0.0, le=100_000.0, description="Per 1M prompt tokens")
    output_per_million: float = Field(
        0.0, ge=0.0, le=100_000.0, description="Per 1M completion tokens"
    )
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million
        ) / 1_000_000


ThinkingMode = Literal["none", "chat_template", "reasoning_effort"]


class ThinkingConfig(Model):
    """Whether the model reasons before it answers, and how hard (seed 004 ``thinking``); only
    for a profile whose model can (``ModelProfile.thinking``)."""

    enabled: bool = True
    effort: Literal["low", "medium", "high"] | None = Field(
        None, description="reasoning_effort models: how hard (default medium)"
    )


class ModelProfile(Model):
    """Which model answers and how (seed 001 ModelProfile, seed 004 per-turn override)."""

    id: LibraryId
    version: int = 0
    provider: Literal["vllm", "openai", "scripted"] = "vllm"
    model: str = Field(DEFAULT_MODEL, max_length=200)
    base_url: str | None = Field(
        None,
        max_length=500,
        description="For provider=openai; on the operator's allow-list "
        "(WONDER_MODEL_ALLOWED_HOSTS)",
    )
    api_key_secret: str | None = Field(
        None,
        pattern=SECRET_NAME_PATTERN,
        description="For provider=openai: the name of your secret holding the API key "
        "(PUT /v1/secrets/{name}); sent as a bearer token",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(256, ge=1, le=32768)
    timeout_s: float = Field(120.0, gt=0, le=3600)
    tool_calling: Literal["native", "constrained"] | None = Field(
        None,
        description="How tools are called; default: constrained for vllm (small local models), "
        "native for openai (hosted models with tool-calling chat templates)",
    )
    script: list[ScriptStep] | None = Field(
        None, max_length=50, description="provider=scripted only: the model's steps, one per call"
    )
    prices: ModelPrices | None = Field(
        None, description="Token prices: each call's estimated cost is recorded with it"
    )
    thinking: ThinkingMode = Field(
        "none",
        description="Whether and how the model thinks: none (it cannot: a turn asking for "
        "thinking is refused), chat_template (reasoning models served by vLLM: "
        "chat_template_kwargs.enable_thinking), reasoning_effort (OpenAI-compatible reasoning "
        "models: reasoning_effort)",
    )
    thinking_config: ThinkingConfig | None = Field(
        None, description="Default thinking of this profile's turns (a message may override it)"
    )

    @model_validator(mode="after")
    def _thinks_only_if_it_can(self) -> ModelProfile:
        if self.thinking_config is not None and self.thinking == "none":
            raise ValueError("thinking_config needs a thinking mode (the model must support it)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_environment_names(cls, data: Any) -> Any:
        # Profiles stored before secrets existed carry ``api_key_env: null``: dropped. A value
        # would name a variable of the server's environment, which no client may do.
        if isinstance(data, dict) and "api_key_env" in data:
            data = dict(data)
            if data.pop("api_key_env") is not None:
                raise ValueError(
                    "api_key_env is not accepted: store the key as a secret (PUT "
                    "/v1/secrets/{name}) and name it with api_key_secret"
                )
        return data


def resolved_tool_calling(profile: ModelProfile) -> Literal["native", "constrained"]:
    """The profile's tool-calling mode, with the per-provider default."""
    if profile.tool_calling is not None:
        return profile.tool_calling
    return "native" if profile.provider == "openai" else "constrained"


class ToolRetry(Model):
    max_attempts: int = Field(1, ge=1, le=10)
    backoff_ms: int = Field(200, ge=0, le=60_000)
    timeout_ms: int = Field(30_000, ge=1, le=3_600_000)


class ToolShortcut(Model):
    """A deterministic route to the tool for models that cannot choose tools well
    (``core.tool_shortcuts``): in ``constrained`` tool calling, a user message matching
    ``pattern`` (RE2) calls the tool with the pattern's named groups as its arguments."""

    pattern: str = Field(min_length=1, max_length=500)


class ApprovalPolicy(Model):
    """A tool call that waits for a person's approval before it runs: how long it waits, and
    what happens when nobody decides in time."""

    timeout_s: int = Field(
        3600, ge=1, le=7 * 24 * 3600, description="How long the call waits for a decision"
    )
    on_timeout: Literal["deny", "approve"] = Field(
        "deny", description="What an undecided call becomes when the time is up"
    )


class Tool(Model):
    """The LLM-facing interface to a task, workflow, agent, or a tool of an MCP server
    (``mcp``: ``target_id`` is ``<server id>/<the server's tool name>``, ``core.mcp``)."""

    id: LibraryId
    version: int = 0
    name: str = Field(pattern=TOOL_NAME)
    description: str = Field(max_length=2000)
    input_schema: JsonObject = Field(default_factory=lambda: {"type": "object"})
    target_type: Literal["task", "workflow", "agent", "mcp"]
    target_id: str = Field(min_length=1, max_length=200)
    is_async: bool = Field(False, alias="async")
    invocation_mode: Literal["delegate", "loop_in"] = "delegate"
    input_mapping: dict[str, str] | None = None
    retry: ToolRetry = Field(default_factory=ToolRetry)
    idempotent: bool = Field(
        False,
        description="Safe to run twice with the same input: a call cut by a crash before its "
        "result was recorded is run again (otherwise the model is told it was interrupted)",
    )

    approval: ApprovalPolicy | None = Field(
        None,
        description="Its calls wait for a person's approval before they run (a persona's "
        "``constraints.approvals`` may ask it of any tool, and wins)",
    )

    shortcut: ToolShortcut | None = Field(
        None,
        description="For small models (constrained tool calling): a user message matching this "
        "pattern calls the tool with its named groups as arguments, skipping the model's choice",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _shortcut_names_arguments(self) -> Tool:
        if self.shortcut is not None:
            try:
                check_pattern(self.shortcut.pattern, self.input_schema.get("properties") or {})
            except ShortcutError as exc:
                raise ValueError(str(exc)) from None
        return self

    @field_validator("input_schema")
    @classmethod
    def _schema_is_valid(cls, value: JsonObject) -> JsonObject:
        check_schema(value)  # a valid schema whose patterns run in linear time
        if value.get("type", "object") != "object":
            raise ValueError("input_schema must describe an object")
        return value


class TaskAction(Model):
    """One step of a task. ``kind`` picks the executor action; ``params`` configure it."""

    model_config = ConfigDict(
        json_schema_extra={  # a python action names its callable (``core.callables``)
            "if": {"required": ["kind"], "properties": {"kind": {"const": "python"}}},
            "then": {
                "required": ["params"],
                "properties": {
                    "params": {
                        "required": ["callable"],
                        "properties": {"callable": {"type": "string", "minLength": 1}},
                    }
                },
            },
        }
    )

    kind: str = Field(pattern=r"^[a-z]+(\.[a-z_]+)?$")
    params: JsonObject = Field(default_factory=dict)


class TaskDef(Model):
    """A library task: a sequence of actions the executor runs as a Ray remote function."""

    id: LibraryId
    version: int = 0
    description: str = Field("", max_length=2000)
    actions: list[TaskAction] = Field(min_length=1, max_length=50)
    idempotent: bool = Field(
        False,
        description="Safe to run twice with the same input: a workflow task node cut by a lost "
        "coordinator is run again (otherwise the node fails as interrupted)",
    )


class Constraints(Model):
    max_moves_per_turn: int = Field(8, ge=1, le=100)
    allowed_agents: list[str] | None = None
    allow: list[str] | None = Field(None, description="Tool names allowed (None = all)")
    deny: list[str] = Field(default_factory=list, description="Tool names denied (wins)")
    shell_hosts: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Hosts shell.exec may reach through Wonder's egress proxy (name, *.domain, "
        "* for any, an IP; each optionally :port), of those the operator allows the client; "
        "none = no network",
    )
    approvals: dict[str, ApprovalPolicy] = Field(
        default_factory=dict,
        max_length=128,
        description="Tools whose calls wait for a person's approval, by tool name (* for every "
        "tool); wins over the tool's own ``approval``",
    )

    @field_validator("approvals")
    @classmethod
    def _approval_names(cls, value: dict[str, ApprovalPolicy]) -> dict[str, ApprovalPolicy]:
        for name in value:
            if name != "*" and not re.fullmatch(TOOL_NAME, name):
                raise ValueError(f"approvals: {name!r} is not a tool name (or *)")
        return value


LEGACY_HOOK_FIELDS = {
    "context_assembly_workflow_id": "context_assembly_task_id",
    "memory_extraction_workflow_id": "memory_extraction_task_id",
}


class Persona(Model):
    """Identity, memory configuration and tools (seed 001)."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_hook_names(cls, data: Any) -> Any:
        # Personas stored before the hooks were named for what they hold (a task id) used
        # ``*_workflow_id``; they still load.
        if isinstance(data, dict):
            for old, new in LEGACY_HOOK_FIELDS.items():
                if old in data and new not in data:
                    data = {**data, new: data[old]}
                    del data[old]
        return data

    id: LibraryId
    version: int = 0
    system_prompt: str = Field(max_length=100_000)
    model_profile_id: str = "local"
    context_assembly_task_id: str | None = Field(
        None, description="Library task that assembles the context (default: built-in)"
    )
    context_assembly_workflow: str | None = Field(
        None,
        description="Library workflow that assembles the context instead of a task (for hooks "
        "that reason about context with extra model calls)",
    )
    memory_extraction_task_id: str | None = Field(
        None, description="Library task that extracts memories after a turn (default: none)"
    )
    memory_extraction_workflow: str | None = Field(
        None,
        description="Library workflow that extracts memories after a turn instead of a task",
    )
    memory_upkeep: MemoryUpkeepPolicy | None = Field(
        None,
        description="Consolidation and retention of the agent's memories, run by the platform "
        "on a schedule (default: none)",
    )
    recent_turns_limit: int = Field(20, ge=0, le=1000)
    tool_ids: list[str] = Field(default_factory=list, max_length=128)
    constraints: Constraints = Field(default_factory=Constraints)

    # At most one context hook and one extraction hook; the published schema says so too (a
    # body the schema accepts is one the server accepts).
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "not": {
                        "required": [task, workflow],
                        "properties": {task: {"type": "string"}, workflow: {"type": "string"}},
                    }
                }
                for task, workflow in (
                    ("context_assembly_task_id", "context_assembly_workflow"),
                    ("memory_extraction_task_id", "memory_extraction_workflow"),
                )
            ]
        }
    )

    @model_validator(mode="after")
    def _one_hook_each(self) -> Persona:
        if self.context_assembly_task_id is not None and self.context_assembly_workflow is not None:
            raise ValueError(
                "context_assembly_task_id and context_assembly_workflow are exclusive: one hook"
            )
        if (
            self.memory_extraction_task_id is not None
            and self.memory_extraction_workflow is not None
        ):
            raise ValueError(
                "memory_extraction_task_id and memory_extraction_workflow are exclusive: one hook"
            )
        return self

    @property
    def context_hook(self) -> str | None:
        """The context-assembly hook's task or workflow id, if the persona has one."""
        return self.context_assembly_task_id or self.context_assembly_workflow

    @property
    def extraction_hook(self) -> str | None:
        """The memory-extraction hook's task or workflow id, if the persona has one."""
        return self.memory_extraction_task_id or self.memory_extraction_workflow


# --------------------------------------------------------------------------- owned entities


class Client(Model):
    id: str
    name: str
    created_at: datetime


class PersonaRef(Model):
    id: str
    version: int | None = None  # None = latest at load time
    # Whose library (issue 13): "system" or the agent's client id; None: the client's own
    # persona with that id if it has one, else the system's (core/store/library.py).
    owner: str | None = None


class Agent(Model):
    id: str
    client_id: str
    name: str = Field(max_length=200)
    persona_ref: PersonaRef | None = None
    persona: Persona | None = None  # inline persona
    project_ids: list[str] = Field(default_factory=list)
    created_at: datetime
    memory_upkeep: MemoryUpkeepPolicy | None = Field(
        None, description="This agent's memory upkeep, instead of its persona's"
    )


class BearerCredentials(Model):
    """A project's credentials as a token: ``Authorization: Bearer <the secret's value>``."""

    secret: str = Field(
        pattern=SECRET_NAME_PATTERN, description="The name of one of your secrets (the token)"
    )
    scheme: Literal["bearer"] = "bearer"


class BasicCredentials(Model):
    """A project's credentials as a user and password: ``Authorization: Basic`` with
    ``username`` and the secret's value as the password."""

    secret: str = Field(
        pattern=SECRET_NAME_PATTERN, description="The name of one of your secrets (the password)"
    )
    scheme: Literal["basic"]
    username: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[!-9;-~]+$",
        description="Printable ASCII, no ':' or space",
    )


ProjectCredentials = BearerCredentials | BasicCredentials
"""What a cloned project's clones and pushes send its origin: a secret of the project's own
client, as an HTTP ``Authorization`` header. Only the secret's name is stored; its value is read
at each clone or push."""


class Project(Model):
    """A git repository agents work on (seed 001 "Shell Operations and Branch Context").

    ``repository`` is the local git directory Wonder works in: a repository the user named by
    path, or one Wonder created or cloned under its data dir (``managed``: deleted with the
    project). ``artifacts_repository`` is a bare repository Wonder keeps for project knowledge.
    """

    id: str
    client_id: str
    name: str = Field(max_length=200)
    repository: str
    origin: str | None = Field(None, description="The URL a managed clone was made from")
    credentials: ProjectCredentials | None = Field(
        None,
        description="The secret sent to origin on each clone and push (its name, never its value)",
    )
    managed: bool = False
    default_branch: str = "main"
    push_on_merge: bool = Field(
        False, description="Push the default branch back to origin after each merge into it"
    )
    artifacts_repository: str
    created_at: datetime
    status: Literal["ready", "cloning", "failed"] = Field(
        "ready",
        description="cloning: the repository is being cloned (poll this project); failed: the "
        "clone did not succeed (error says why; delete the project)",
    )
    error: str | None = Field(None, description="Why the clone failed")


class ConversationStatus(StrEnum):
    ACTIVE = "active"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"


class Participant(Model):
    type: Literal["user", "agent"]
    id: str


class ConcurrencyPolicy(StrEnum):
    """What a message that arrives while a turn is active does (seed 001: parallel)."""

    PARALLEL = "parallel"
    QUEUE = "queue"
    REJECT = "reject"
    INTERRUPT = "interrupt"


class Conversation(Model):
    id: str
    client_id: str
    agent_id: str | None = None
    participants: list[Participant] = Field(default_factory=list)
    status: ConversationStatus = ConversationStatus.ACTIVE
    title: str | None = None
    started_by_conversation_id: str | None = None
    started_by_message_id: str | None = None
    forked_from_conversation_id: str | None = None
    forked_at_turn_id: str | None = None
    project_id: str | None = None
    branch: str | None = None
    depth: int = 0
    concurrency_policy: ConcurrencyPolicy = ConcurrencyPolicy.PARALLEL
    created_at: datetime


class UserCaller(Model):
    type: Literal["user"] = "user"
    user_id: str


class WorkflowCaller(Model):
    type: Literal["workflow"] = "workflow"
    run_id: str


class AgentCaller(Model):
    type: Literal["agent"] = "agent"
    agent_id: str
    turn_id: str
    conversation_id: str


Caller = Annotated[UserCaller | WorkflowCaller | AgentCaller, Field(discriminator="type")]


MessageSource = Literal["human", "trigger", "agent", "webhook", "cron", "event"]
"""Where a turn's input came from (seed 004)."""


class TurnStatus(StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"


class TurnIssues(Model):
    memory_extraction_failed: bool = False
    memory_extraction_pending: bool = Field(
        False,
        description="The turn completed and its memory extraction has not run to its end yet "
        "(seed 001: extraction runs after the turn completes)",
    )
    tool_failures: int = 0
    context_assembly_failed: bool = False


class Usage(Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Turn(Model):
    id: str
    conversation_id: str
    agent_id: str | None
    parent_turn_id: str | None = None
    caller: Caller
    user_id: str | None = Field(
        None,
        description="The user this turn works for (per-user quotas): the author of a user's "
        "message, or the user of the turn whose delegation or workflow started it",
    )
    input: str
    source: MessageSource = "human"
    reply_to_message_id: str | None = None
    status: TurnStatus = TurnStatus.ACTIVE
    failure_reason: str | None = None
    failure_code: ErrorCode | None = None  # AGENT_DECLINED when the agent declined
    context_assembly_run_id: str | None = Field(
        None,
        description="The context hook run of the turn's latest model loop, stored with the turn's "
        "answer, failure or wait for async operations",
    )
    memory_extraction_run_id: str | None = None
    issues: TurnIssues = Field(default_factory=TurnIssues)
    usage: Usage = Field(default_factory=Usage)
    created_at: datetime
    started_at: datetime | None = None  # set when the loop starts running it
    awaiting_operations: bool = False  # answered; waits only for async operations
    awaiting_approval: bool = False  # tool calls wait for a person's decision (approvals)
    completed_at: datetime | None = None


class MessageRole(StrEnum):
    USER = "user"
    AGENT = "agent"
    SYSTEM = "system"
    TOOL = "tool"


class Message(Model):
    id: str
    conversation_id: str
    turn_id: str
    role: MessageRole
    author: str
    content: str
    seq: int = 0
    source: MessageSource | None = Field(
        None, description="Who or what initiated it (seed 004): an agent's own words are 'agent'"
    )
    created_at: datetime


class ToolError(Model):
    code: ErrorCode
    message: str
    retriable: bool = False

    @classmethod
    def of(cls, error: WonderError) -> ToolError:
        """A raised error as the error part of a result (its code and retryability kept)."""
        return cls(code=error.code, message=error.message, retriable=error.retriable)


class ToolResult(Model):
    """What a tool call returns to the model (ARCHITECTURE.md §6)."""

    tool_call_id: str
    success: bool
    result: Any = None
    error: ToolError | None = None


class ToolCallRecord(Model):
    id: str
    tool_id: str
    name: str
    input: JsonObject


class Move(Model):
    id: str
    turn_id: str
    sequence: int
    reasoning: str | None = None
    tool_call: ToolCallRecord | None = None
    tool_result: ToolResult | None = None
    raw: JsonObject | None = None
    created_at: datetime


class OperationStatus(StrEnum):
    PENDING = "pending"  # dispatched, running
    COMPLETED = "completed"  # result stored, not yet delivered to the conversation
    DELIVERED = "delivered"  # the conversation answered with it (exactly once)
    CANCELLED = "cancelled"


class AsyncOperation(Model):
    """An async tool call: recorded before dispatch, delivered to its turn exactly once."""

    id: str
    conversation_id: str
    turn_id: str
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: JsonObject = Field(default_factory=dict)
    status: OperationStatus = OperationStatus.PENDING
    result: ToolResult | None = None
    created_at: datetime
    started_at: datetime | None = None  # the runner took it: from then on its tool may have run
    completed_at: datetime | None = None
    delivery_error: str | None = Field(
        None,
        description="Why the result could not be handed to its conversation (it is kept "
        "and delivered when the conversation next activates)",
    )


class Event(Model):
    """A durable, per-conversation, seq-numbered event."""

    conversation_id: str
    seq: int
    type: str
    payload: JsonObject = Field(default_factory=dict)
    at: datetime


class PendingExtraction(Model):
    """A completed turn's memory extraction that has not run to its end (stored until it has,
    so a restarted conversation actor runs it again)."""

    conversation_id: str
    turn_id: str
    agent_id: str
    task_id: str  # the hook's task id, or its workflow id when ``workflow``
    workflow: bool = False
