"""What the Conversation's state machine reasons about: its state, events in, decisions out.

Events are past tense (what happened: a message arrived, the model answered, tools returned...),
decisions are imperatives (begin a turn, call the model, run tools, complete the turn...). Ids and
times arrive inside events, so planning stays pure. ``ConversationState`` is the live part of a
conversation as planning sees it: the conversation row and every turn that is not finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from core.domain import (
    Agent,
    AsyncOperation,
    Caller,
    ConcurrencyPolicy,
    Conversation,
    ConversationStatus,
    Message,
    MessageSource,
    ModelProfile,
    Move,
    Participant,
    PendingExtraction,
    Persona,
    TaskDef,
    Tool,
    ToolError,
    ToolResult,
    Turn,
    Usage,
)
from core.errors import ErrorCode
from core.jsontypes import JsonObject
from core.llm.protocol import ChatRequest, ToolCallRequested
from core.quotas import TurnAdmission

# --------------------------------------------------------------------------- what a turn works with


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    """The tools a turn may use, by the name the model sees, plus the persona's permissions."""

    by_name: dict[str, Tool] = field(default_factory=dict)
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    allowed_agents: tuple[str, ...] | None = None

    def permitted(self, name: str) -> bool:
        if name in self.deny:
            return False
        return self.allow is None or name in self.allow

    def visible(self) -> list[Tool]:
        return [tool for name, tool in sorted(self.by_name.items()) if self.permitted(name)]


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What a turn needs to know about its agent, loaded when its context is assembled."""

    agent: Agent
    persona: Persona
    profile: ModelProfile
    catalog: ToolCatalog
    hook_tasks: tuple[TaskDef, ...] = ()  # the persona's hooks that are library tasks, as read

    def hook_task(self, task_id: str) -> TaskDef | None:
        """The hook's task definition as read with this setup (``None``: not read with it)."""
        return next((task for task in self.hook_tasks if task.id == task_id), None)

    @property
    def max_moves(self) -> int:
        return self.persona.constraints.max_moves_per_turn

    @property
    def extraction_task_id(self) -> str | None:
        """The memory-extraction hook: a library task's id, or a workflow's
        (``extraction_is_workflow``)."""
        return self.persona.extraction_hook

    @property
    def extraction_is_workflow(self) -> bool:
        return self.persona.memory_extraction_workflow is not None


class TurnPhase(StrEnum):
    """Where a live turn is. A finished turn (completed or failed) is no longer live."""

    QUEUED = "queued"  # acknowledged; waits for the turn before it (queue policy)
    ASSEMBLING = "assembling"  # context assembly is running
    THINKING = "thinking"  # a model call is running
    ACTING = "acting"  # the tool calls of the last answer are running
    APPROVING = "approving"  # the tool calls of the last answer wait for a person's approval
    AWAITING = "awaiting"  # answered; async operations of this turn are still out


RUNNING_PHASES = frozenset(
    {TurnPhase.ASSEMBLING, TurnPhase.THINKING, TurnPhase.ACTING, TurnPhase.APPROVING}
)

APPROVE, DENY, EDIT = "approve", "deny", "edit"  # what a person decides of a tool call


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waiting for a person's decision (``approval.requested``): the call as the
    model made it, and when it stops waiting (``on_timeout``: what it becomes then)."""

    approval_id: str
    tool_call_id: str
    tool: str
    arguments: JsonObject
    timeout_s: int
    on_timeout: str
    requested_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ApprovalVerdict:
    """A decision on one request (``approval.decided``): ``approve``, ``deny`` or ``edit`` (run
    with ``arguments`` instead); ``decided_by`` a user, the client, or ``timeout``."""

    approval_id: str
    decision: str
    decided_by: str
    at: datetime
    arguments: JsonObject | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalWait:
    """The tool calls of one answer, held until every request among them is decided: the
    answer's calls and operation ids as the model made them (planned again, as decided, when
    none waits), and the decisions so far."""

    iteration: int
    reasoning: str
    calls: tuple[ToolCallRequested, ...]
    operation_ids: tuple[str, ...]
    requests: tuple[ApprovalRequest, ...]
    verdicts: tuple[ApprovalVerdict, ...] = ()

    @property
    def pending(self) -> tuple[ApprovalRequest, ...]:
        decided = {v.approval_id for v in self.verdicts}
        return tuple(r for r in self.requests if r.approval_id not in decided)


@dataclass(slots=True)
class TurnState:
    """A live turn as planning sees it."""

    turn_id: str
    agent_id: str | None
    phase: TurnPhase
    setup: AgentSetup | None = None
    base: ChatRequest | None = None  # the assembled context of the current model loop
    moves_made: int = 0
    # OpenAI-shaped messages this loop added after context assembly (tool calls and results).
    transcript: tuple[JsonObject, ...] = ()
    last_text: str = ""  # what the model said beside its tool calls (the move's reasoning)
    open_calls: tuple[ToolCallRequested, ...] = ()  # tool calls whose results are not in yet
    agent_calls: tuple[str, ...] = ()  # the open calls dispatched to an agent (their ids)
    pending_operations: frozenset[str] = frozenset()  # async operations not yet delivered
    delivering: AsyncOperation | None = None  # the completed operation this loop answers
    deliveries: tuple[AsyncOperation, ...] = ()  # completed operations waiting their turn
    usage: Usage = field(default_factory=Usage)
    awaiting_recorded: bool = False  # the store marks it awaiting its operations
    resuming: Resumption | None = None  # a turn cut mid-loop, resumed at its next context
    approval: ApprovalWait | None = None  # its tool calls wait for decisions (``approving``)
    # The context hook run the current loop adopted: stored on the turn with its next save (its
    # answer, its failure or its wait), not in a write of its own on the way to the model.
    context_run_id: str | None = None


@dataclass(slots=True)
class ConversationState:
    """One conversation as planning sees it: its row, its live turns, and the memory
    extractions running for turns already completed (by turn id)."""

    conversation: Conversation
    turns: dict[str, TurnState] = field(default_factory=dict)
    queue: list[str] = field(default_factory=list)  # queued turn ids, oldest first
    extracting: dict[str, PendingExtraction] = field(default_factory=dict)

    @property
    def running(self) -> list[str]:
        """Turns doing something now (not queued, not just waiting for async operations)."""
        return [t.turn_id for t in self.turns.values() if t.phase in RUNNING_PHASES]

    @property
    def busy(self) -> bool:
        """Whether a new message arrives mid-turn (for the concurrency policy)."""
        return bool(self.running) or bool(self.queue)


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """Input for a new turn: a user's message, or another agent's or a workflow's call.

    ``policy_applies`` is False for calls from agents and workflows: they always start at once.
    ``parent_turn_id`` is resolved by the shell (the replied-to message's turn, else the latest).
    ``admission`` is what the turn quotas say, read by the shell: whom the turn works for, and
    the figures that refuse a call from an agent or a workflow over quota (a user's message was
    admitted by the gateway already). None: not read (the turn works for its user caller).
    """

    turn_id: str
    message_id: str
    content: str
    author: str
    caller: Caller
    source: MessageSource
    requested_agent_id: str | None
    reply_to_message_id: str | None
    parent_turn_id: str | None
    policy_applies: bool
    at: datetime
    admission: TurnAdmission | None = None


@dataclass(frozen=True, slots=True)
class TurnRequested:
    """Run a turn someone else wrote and acknowledged: a delegated child's first turn, or a
    user's message acknowledged while this actor was starting (``policy_applies``: it queues
    behind a running turn in a ``queue`` conversation). ``admission``: as for
    ``MessageReceived`` (a delegated child's turn over quota fails instead of starting)."""

    turn: Turn
    at: datetime
    policy_applies: bool = False
    admission: TurnAdmission | None = None


@dataclass(frozen=True, slots=True)
class StartedTools:
    """The tool calls of one model answer, recorded (``tools.started``) before they run."""

    iteration: int  # the move number of that answer (1 for the turn's first tool calls)
    reasoning: str
    calls: tuple[ToolCallRequested, ...]


@dataclass(frozen=True, slots=True)
class RecoveredTurn:
    """A turn the store holds as active when this incarnation of the actor starts.

    ``moves`` are the turn's recorded moves, ``started`` the last tool calls it recorded as
    started (their results are recorded as moves when they all return), ``resumes`` how many
    times it was resumed already (``turn.resumed`` events) and ``answered`` whether its answer
    is stored. ``admission``: for a turn not started yet, what the turn quotas say (a delegated
    child's turn over quota fails instead of starting, as with ``TurnRequested``)."""

    turn: Turn
    operations: tuple[AsyncOperation, ...] = ()  # its operations still pending or completed
    moves: tuple[Move, ...] = ()
    started: StartedTools | None = None
    resumes: int = 0
    answered: bool = False
    admission: TurnAdmission | None = None
    approval: ApprovalWait | None = None  # the last answer's approvals as recorded (no plans)


@dataclass(frozen=True, slots=True)
class Resumption:
    """What an interrupted turn continues from, once its context is assembled again: the tool
    exchanges already recorded (``transcript``, ``moves_made``), the calls it started whose
    results never came (``interrupted``, from the answer ``reasoning`` went with), or its stored
    answer (``answered``: only what follows the answer is left)."""

    transcript: tuple[JsonObject, ...]
    moves_made: int
    interrupted: tuple[ToolCallRequested, ...] = ()
    reasoning: str = ""
    operation_ids: dict[str, str] = field(default_factory=dict)  # started async call → op id
    answered: bool = False
    approving: ApprovalWait | None = None  # its last answer still waits for approvals
    denied: dict[str, ToolResult] = field(default_factory=dict)  # started call → its denial


@dataclass(frozen=True, slots=True)
class Recovered:
    """The actor (re)started: what a previous incarnation left active, and the memory
    extractions of completed turns it did not finish."""

    turns: tuple[RecoveredTurn, ...]
    at: datetime
    extractions: tuple[PendingExtraction, ...] = ()


@dataclass(frozen=True, slots=True)
class ContextAssembled:
    turn_id: str
    setup: AgentSetup
    base: ChatRequest
    at: datetime
    hook_run_id: str | None = None  # the context-assembly hook's run, when the persona has one


@dataclass(frozen=True, slots=True)
class ContextAssemblyFailed:
    turn_id: str
    error: ToolError
    at: datetime
    hook_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class ModelAnswered:
    """The model finished a call: text and/or tool calls.

    ``operation_ids`` has one fresh id per tool call, used when that call is an async tool.
    ``tokens_left``: the model tokens the day had left for this turn before it started spending
    (its client's and user's ``tokens_per_day``, read by the shell; None: no limit).
    ``schema_problems``: per tool call, how its arguments break the tool's input schema (None:
    they do not), found by the shell off the event loop; None: not checked, planning checks.
    """

    turn_id: str
    text: str
    tool_calls: tuple[ToolCallRequested, ...]
    usage: Usage
    operation_ids: tuple[str, ...]
    at: datetime
    tokens_left: int | None = None
    schema_problems: tuple[str | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class ModelFailed:
    """The model call failed after its retries."""

    turn_id: str
    error: ToolError
    at: datetime


@dataclass(frozen=True, slots=True)
class ToolsReturned:
    """Every tool call of the last answer has a result (ran, refused or acknowledged)."""

    turn_id: str
    results: tuple[ToolResult, ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class OperationCompleted:
    """An async operation finished (its result is stored): answer with it on its turn."""

    operation: AsyncOperation
    at: datetime


@dataclass(frozen=True, slots=True)
class OperationsChecked:
    """The runner says which of a recovered turn's pending operations it is still running."""

    turn_id: str
    lost: tuple[AsyncOperation, ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class MemoriesExtracted:
    turn_id: str
    at: datetime
    hook_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryExtractionFailed:
    turn_id: str
    error: ToolError
    at: datetime
    hook_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequested:
    turn_id: str
    reason: str
    at: datetime


@dataclass(frozen=True, slots=True)
class StepFailed:
    """A step of the turn could not go on (its agent is gone, a bug, the store went away): the
    turn fails with ``reason`` (and ``error``, when the caller may ask again) and is not left
    dangling."""

    turn_id: str
    reason: str
    at: datetime
    error: ToolError | None = None


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """A person decided on a waiting tool call (the API, the stream, the console)."""

    verdict: ApprovalVerdict


@dataclass(frozen=True, slots=True)
class ApprovalTimedOut:
    """A waiting tool call's time is up (the shell's timer)."""

    approval_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class ParticipantAdded:
    agent_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class ParticipantRemoved:
    agent_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class PolicySet:
    policy: ConcurrencyPolicy
    at: datetime


@dataclass(frozen=True, slots=True)
class CompletionRequested:
    """A user ends the conversation (conversations complete only by explicit action)."""

    at: datetime


ConversationEvent = (
    MessageReceived
    | TurnRequested
    | Recovered
    | ContextAssembled
    | ContextAssemblyFailed
    | ModelAnswered
    | ModelFailed
    | ToolsReturned
    | OperationCompleted
    | OperationsChecked
    | MemoriesExtracted
    | MemoryExtractionFailed
    | CancelRequested
    | StepFailed
    | ApprovalDecided
    | ApprovalTimedOut
    | ParticipantAdded
    | ParticipantRemoved
    | PolicySet
    | CompletionRequested
)


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the request that caused the event (the entry point raises the matching error)."""

    code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class BeginTurn:
    """Persist a new turn and its input message (the acknowledgement)."""

    turn: Turn
    message: Message


@dataclass(frozen=True, slots=True)
class QueueTurn:
    turn_id: str
    agent_id: str | None


@dataclass(frozen=True, slots=True)
class StartTurn:
    """A turn that was written but not started (queued, delegated, recovered) starts now."""

    turn_id: str
    agent_id: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class ResumeTurn:
    """A turn cut mid-loop by a crash continues: it assembles its context again, then goes on
    from ``resumption`` (``turn.resumed`` is announced beside it)."""

    turn_id: str
    agent_id: str | None
    usage: Usage
    operations: frozenset[str]
    resumption: Resumption


@dataclass(frozen=True, slots=True)
class ResumeLoop:
    """Take up a resumed turn's model loop where the crash left it."""

    turn_id: str
    transcript: tuple[JsonObject, ...]
    moves_made: int


@dataclass(frozen=True, slots=True)
class AssembleContext:
    """Load the agent's setup and build the context (with the hook task, when the persona has one).

    ``delivering`` is the completed async operation this model loop answers, if any.
    """

    turn_id: str
    agent_id: str | None
    delivering: AsyncOperation | None = None


@dataclass(frozen=True, slots=True)
class AdoptContext:
    """Remember the turn's agent setup and assembled context for the loop that follows."""

    turn_id: str
    setup: AgentSetup
    base: ChatRequest
    hook_run_id: str | None = None  # recorded on the turn (``context_assembly_run_id``)


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model; ``transcript`` and ``moves_made`` are the loop's state for this call."""

    turn_id: str
    request: ChatRequest
    profile: ModelProfile
    transcript: tuple[JsonObject, ...]
    moves_made: int


@dataclass(frozen=True, slots=True)
class AddUsage:
    """The turn's token counts so far, after a model call."""

    turn_id: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class DispatchTool:
    """Run a valid tool call on its target (task, workflow or agent) and wait for its result."""

    call: ToolCallRequested
    tool: Tool
    input: JsonObject


@dataclass(frozen=True, slots=True)
class StartOperation:
    """An async tool call: record the operation (intent first), hand it to the runner, and
    acknowledge the call to the model at once with ``ack``."""

    call: ToolCallRequested
    operation: AsyncOperation
    ack: ToolResult
    tool: Tool | None = None  # what it calls (an agent tool in loop_in mode joins at once)


@dataclass(frozen=True, slots=True)
class ReturnToolError:
    """Answer a tool call without dispatching it: a business error (bad input, denied...), or,
    for a resumed turn, what is known of a call the crash cut (see ``planning``)."""

    call: ToolCallRequested
    result: ToolResult


ToolPlan = DispatchTool | StartOperation | ReturnToolError


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run every tool call of the last answer (sync ones are awaited, async ones acknowledged).

    ``reasoning`` is what the model said beside the calls (recorded with their moves)."""

    turn_id: str
    agent_id: str
    plans: tuple[ToolPlan, ...]
    reasoning: str
    iteration: int = 1  # the move number these calls make (``tools.started`` records it)


@dataclass(frozen=True, slots=True)
class RequestApprovals:
    """Hold the last answer's tool calls until a person decides on those that need it
    (``announce``: record ``approval.requested`` for each; False when a restarted turn waits
    again for what it recorded)."""

    turn_id: str
    wait: ApprovalWait
    announce: bool = True


@dataclass(frozen=True, slots=True)
class SettleApproval:
    """Record a decision on a waiting tool call (``approval.decided``); ``last``: nothing else
    of the answer waits now."""

    turn_id: str
    request: ApprovalRequest
    verdict: ApprovalVerdict
    last: bool


@dataclass(frozen=True, slots=True)
class RecordMoves:
    """One move per tool call of the last answer, with its result; failures emit events."""

    turn_id: str
    calls: tuple[ToolCallRequested, ...]
    results: tuple[ToolResult, ...]
    reasoning: str
    iteration: int
    at: datetime
    agent_calls: tuple[str, ...] = ()  # the calls that went to an agent (``agent_call.*``)


@dataclass(frozen=True, slots=True)
class AppendAgentMessage:
    """The agent's answer (and its move); ``delivers`` marks the operation it answers delivered,
    in the same transaction."""

    turn_id: str
    agent_id: str
    content: str
    delivers: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class AwaitOperations:
    """The agent answered, but async operations of this turn are still out: keep it active.

    ``announce`` is True the first time (the turn is marked awaiting, ``turn.awaiting``)."""

    turn_id: str
    usage: Usage
    announce: bool


@dataclass(frozen=True, slots=True)
class WaitForOperations:
    """A recovered turn that had answered keeps waiting for its async operations."""

    turn_id: str
    agent_id: str | None
    operations: frozenset[str]
    usage: Usage


@dataclass(frozen=True, slots=True)
class HoldDelivery:
    """A completed operation arrived while its turn is busy: answer it when the turn is free."""

    turn_id: str
    operation: AsyncOperation


@dataclass(frozen=True, slots=True)
class ExtractMemories:
    """Run the memory extraction of a completed turn (recorded as pending by its completion)."""

    extraction: PendingExtraction

    @property
    def turn_id(self) -> str:
        return self.extraction.turn_id


@dataclass(frozen=True, slots=True)
class SettleExtraction:
    """A completed turn's memory extraction is over: no longer pending; ``failed`` is noted on
    the turn (``issues.memory_extraction_failed``)."""

    turn_id: str
    failed: bool
    at: datetime
    hook_run_id: str | None = None  # recorded on the turn (``memory_extraction_run_id``)


@dataclass(frozen=True, slots=True)
class CompleteTurn:
    """The turn is answered and nothing is pending. ``extraction``: its memory extraction, to
    run after (seed 001), recorded as pending in the same transaction."""

    turn_id: str
    usage: Usage
    at: datetime
    extraction: PendingExtraction | None = None


@dataclass(frozen=True, slots=True)
class FailTurn:
    turn_id: str
    reason: str
    usage: Usage
    context_failed: bool
    at: datetime
    error: ToolError | None = None  # what failed, when a step did (``retriable``: ask again)
    cancelled: bool = False  # stopped on purpose (a cancel, the interrupt policy): not a failure
    context_assembly_run_id: str | None = None  # the hook run that failed, when one did


@dataclass(frozen=True, slots=True)
class NoteEvent:
    """A durable event with no entity write (errors of hooks)."""

    type: str
    payload: JsonObject
    at: datetime


@dataclass(frozen=True, slots=True)
class CloseDangling:
    """Give every open tool call of a turn an error result, and cancel its pending operations."""

    turn_id: str
    calls: tuple[ToolCallRequested, ...]
    operations: tuple[str, ...]
    message: str
    at: datetime


@dataclass(frozen=True, slots=True)
class StopWork:
    """Stop whatever the turn's current step is doing (cancel its task)."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class CheckOperations:
    """Ask the runner whether a recovered turn's pending operations are still running (those it
    never took are handed to it now)."""

    turn_id: str
    agent_id: str | None
    operations: tuple[AsyncOperation, ...]


@dataclass(frozen=True, slots=True)
class SettleOperation:
    """Store an operation's final state: ``cancelled`` (its turn is over) or ``completed`` with
    ``result`` (a pending operation the runner lost)."""

    operation: AsyncOperation


@dataclass(frozen=True, slots=True)
class SaveConversation:
    """Persist a change to the conversation row, announced by ``event``."""

    conversation: Conversation
    event: str
    payload: JsonObject
    at: datetime


@dataclass(frozen=True, slots=True)
class MarkConversation:
    """Record on the conversation row what its turns imply, with no event of its own (the
    batch's own events announce the change): its ``status`` (``standing.conversation_status``)
    and the users who joined by speaking."""

    status: ConversationStatus
    joined: tuple[Participant, ...] = ()


Decision = (
    Refuse
    | BeginTurn
    | QueueTurn
    | StartTurn
    | ResumeTurn
    | ResumeLoop
    | AssembleContext
    | AdoptContext
    | CallModel
    | AddUsage
    | RunTools
    | RequestApprovals
    | SettleApproval
    | RecordMoves
    | AppendAgentMessage
    | AwaitOperations
    | WaitForOperations
    | HoldDelivery
    | ExtractMemories
    | SettleExtraction
    | CompleteTurn
    | FailTurn
    | NoteEvent
    | CloseDangling
    | StopWork
    | CheckOperations
    | SettleOperation
    | SaveConversation
    | MarkConversation
)
