"""Ports: what actors, the gateway and jobs need from the rest of the system, as protocols.

Actors and deployments are handed objects that implement these at construction (``cluster/`` builds
the Ray adapters; tests hand in fakes or in-process implementations), so nothing below ``cluster/``
reaches up for a collaborator. The models here are the typed answers that cross actor calls: no
``dict`` is re-parsed on the other side (Ray Serve's controller ↔ deployment-state split and vLLM's
engine-core ↔ executor interfaces are the models for this shape).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import Field

from core.approvals import ApprovalOutcome
from core.approvals import Decision as ApprovalChoice
from core.context_window import PromptCounts
from core.domain import (
    Caller,
    ConcurrencyPolicy,
    ConversationStatus,
    Model,
    ModelProfile,
    TaskDef,
    ToolError,
    ToolResult,
    TurnStatus,
)
from core.errors import ErrorCode, WonderError
from core.jsontypes import JsonObject
from core.llm.protocol import ChatModel
from core.memory.embedding import Embedder
from core.memory_policy import MemoryUpkeepPolicy
from core.quotas import Refusal, TurnAdmission
from core.workflows import ConversationParent, NodeRecord, WorkflowParent, WorkflowRun
from core.workspaces import (
    ExecResult,
    RepoCommit,
    RepoDiff,
    RepoFile,
    RepoSearch,
    RepoTree,
    SandboxPolicy,
    WorkspaceSpec,
    WorkspaceStatus,
)

if TYPE_CHECKING:
    from core.memory.service import MemoryService

# --------------------------------------------------------------------------- answers across calls

InvocationMode = Literal["delegate", "loop_in"]


class MessageAck(Model):
    """A user message is durable: its turn and message ids, its event ``seq``."""

    conversation_id: str
    turn_id: str
    message_id: str
    seq: int
    queued: bool = False


class AgentAnswer(Model):
    """How a turn run for another agent or a workflow ended, and what the agent said last."""

    conversation_id: str
    turn_id: str
    status: TurnStatus
    failure_reason: str | None = None
    failure_code: ErrorCode | None = None
    content: str = ""

    @property
    def declined(self) -> bool:
        return self.failure_code is ErrorCode.AGENT_DECLINED

    @property
    def over_quota(self) -> bool:
        """The turn was refused by a quota (its reason says which, and when to retry)."""
        return self.failure_code is ErrorCode.QUOTA_EXCEEDED


class TurnOutcome(Model):
    """A turn's status as stored (``wait_for_turn``, ``cancel_turn``)."""

    turn_id: str
    status: TurnStatus
    failure_reason: str | None = None
    awaiting_operations: bool = False


class ParticipantChange(Model):
    agent_id: str
    joined: bool = False
    left: bool = False


class ConversationChange(Model):
    """A conversation-level setting after a change (policy, completion)."""

    conversation_id: str
    status: ConversationStatus
    concurrency_policy: ConcurrencyPolicy


class TaskOutcome(Model):
    """What a library task returned: a result, or a business error for the caller's model."""

    success: bool
    result: Any = None
    error: ToolError | None = None

    @classmethod
    def ok(cls, result: Any) -> TaskOutcome:
        return cls(success=True, result=result)

    @classmethod
    def failed(cls, error: WonderError) -> TaskOutcome:
        return cls(success=False, error=ToolError.of(error))

    def for_call(self, tool_call_id: str) -> ToolResult:
        """This outcome as the ``ToolResult`` of one tool call."""
        return ToolResult(
            tool_call_id=tool_call_id, success=self.success, result=self.result, error=self.error
        )

    def error_message(self) -> str:
        return self.error.message if self.error is not None else ""


def failed_outcome(code: ErrorCode, message: str, *, retriable: bool = False) -> TaskOutcome:
    return TaskOutcome(
        success=False, error=ToolError(code=code, message=message, retriable=retriable)
    )


class TaskContext(Model):
    """Where a task runs (it crosses to the executor with the task): conversation, agent, turn."""

    client_id: str | None = None
    conversation_id: str | None = None
    agent_id: str | None = None
    turn_id: str | None = None
    run_id: str | None = None
    settings_env: dict[str, str] = Field(default_factory=dict)
    node_id: str | None = None  # the workflow node that runs it
    hook: Literal["context_assembly", "memory_extraction"] | None = None
    hook_run_id: str | None = None  # the turn's hook run it belongs to
    traceparent: str | None = None  # the W3C context of the caller's span (its trace)


# --------------------------------------------------------------------------- collaborators


class ChatModels(Protocol):
    """Which ``ChatModel`` answers for a model profile."""

    def for_profile(self, profile: ModelProfile, client_id: str | None = None) -> ChatModel:
        """The model for ``profile``, its secrets resolved for ``client_id`` (whose turn or
        task calls it) when it is called."""
        ...

    def prewarm(self, profile: ModelProfile) -> None:
        """Get ready to serve ``profile`` (imports, handles); blocking, run it off the loop."""
        ...


class ServedModels(Protocol):
    """The model names the local model deployment answers to (models, aliases, LoRA adapters)."""

    def names(self) -> frozenset[str] | None:
        """``None`` when nothing says: no local model is deployed, or it did not answer in time
        (a profile is then stored unchecked, and a turn on an unserved name fails as
        ``INVALID_INPUT``). Blocking: call it off the event loop."""
        ...


class PromptTokenizers(Protocol):
    """The local model deployments' chat templates and tokenizers (exact context-window counts)."""

    def count(self, deployment: str | None, model: str, bodies: list[JsonObject]) -> PromptCounts:
        """The prompt tokens of each chat body as the deployment serving ``model`` renders it
        (``deployment``, when the call recorded which one served it). ``Unavailable`` when no
        deployment answers, ``InvalidInput`` when it refuses a body. Blocking: call it off the
        event loop."""
        ...


class Embedders(Protocol):
    """The embedder memories are written and searched with (the Serve deployment when it is up)."""

    async def embedder(self) -> Embedder: ...


class MemoryAccess(Protocol):
    """This process's memory service (LanceDB + object store + the embedder)."""

    async def service(self) -> MemoryService: ...


class TaskRunner(Protocol):
    """The executor: runs a library task somewhere and answers with its outcome.

    Business failures come back as a failed ``TaskOutcome``; infrastructure failures raise
    ``RetryableError`` so the caller's retry policy applies. Cancelling the awaiting coroutine
    cancels the task if it has not started; one already running on a long-lived executor process
    runs to its end (within the action time limit).
    """

    async def run(
        self, task: TaskDef, task_input: JsonObject, context: TaskContext
    ) -> TaskOutcome: ...


class Conversations(Protocol):
    """Reaching Conversation actors (get-or-create through the directory, one retry helper)."""

    async def reserved_conversation_id(self) -> str | None:
        """An id whose actor is already started, for a conversation about to be created with
        it; ``None`` when none is ready (the caller picks its own id)."""
        ...

    async def post_message(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        source: str = "human",
        reply_to_message_id: str | None = None,
        message_id: str | None = None,
        agent_id: str | None = None,
    ) -> MessageAck:
        """Store the message and start its turn. A message to a conversation whose log no actor
        holds is acknowledged in the store at once (its actor is activated meanwhile)."""
        ...

    async def start_agent_call(
        self,
        conversation_id: str,
        input: str,
        caller: Caller,
        mode: InvocationMode = "delegate",
        agent_id: str | None = None,
        message_id: str | None = None,
    ) -> AgentAnswer:
        """One turn answering ``input`` in the conversation, by ``agent_id`` (default: its primary
        agent). ``loop_in``: that agent first joins the conversation as a participant. A call
        repeated with the same ``message_id`` answers with the turn that message started."""
        ...

    async def run_agent_turn(self, conversation_id: str, turn_id: str) -> AgentAnswer: ...

    async def wait_for_turn(
        self, conversation_id: str, turn_id: str, timeout_s: float = 300.0
    ) -> TurnOutcome: ...

    async def deliver_operation(self, conversation_id: str, op_id: str) -> bool: ...

    async def cancel_turn(
        self, conversation_id: str, turn_id: str, reason: str = "cancelled"
    ) -> TurnOutcome: ...

    async def decide_approval(
        self,
        conversation_id: str,
        approval_id: str,
        decision: ApprovalChoice,
        decided_by: str,
        arguments: JsonObject | None = None,
        reason: str | None = None,
    ) -> ApprovalOutcome:
        """A person's decision on a tool call waiting for approval (``core.approvals``)."""
        ...

    async def add_participant(self, conversation_id: str, agent_id: str) -> ParticipantChange: ...

    async def remove_participant(
        self, conversation_id: str, agent_id: str
    ) -> ParticipantChange: ...

    async def set_policy(
        self, conversation_id: str, policy: ConcurrencyPolicy
    ) -> ConversationChange: ...

    async def complete_conversation(self, conversation_id: str) -> ConversationChange: ...

    def stream_events(
        self, conversation_id: str, after_seq: int = 0, *, marker: bool = False
    ) -> AsyncIterator[JsonObject]:
        """Stored events after ``after_seq``, the tokens of replies in flight, then live ones,
        each durable event once and in order, until the caller stops iterating. Needs no actor:
        following a conversation neither starts its actor nor keeps it resident. ``marker``: a
        ``subscribed`` frame first, once nothing after it can be missed."""
        ...

    async def stop_conversations(self, conversation_ids: list[str]) -> None: ...


class TurnQuotas(Protocol):
    """What turn quotas are checked on, read from the store (``core.turn_quotas``): planning
    decides with these figures (``core.quotas``), the shell reads them."""

    def admission(
        self, client_id: str, user_id: str | None, at: datetime, *, excluding: str | None = None
    ) -> TurnAdmission:
        """The client's (and ``user_id``'s) turn quotas with their figures: active turns and the
        day's tokens, the turn ``excluding`` left out."""
        ...

    async def tokens_left(self, client_id: str, turn_id: str, at: datetime) -> int | None:
        """The model tokens the day has left for ``turn_id`` under its client's and user's
        ``tokens_per_day`` (other turns' recorded tokens counted, its own not); None: no limit."""
        ...

    def conversation_refusal(self, client_id: str) -> Refusal | None:
        """Why one more conversation of the client's would go over its ``conversations`` quota
        (a route that forks, or makes a persona's main session), or None."""
        ...

    def acting_user(self, client_id: str, caller: Caller) -> str | None:
        """The user a new turn works for: a user caller (not the client acting as itself), or
        the user of the turn whose delegation or workflow calls."""
        ...


class MemoryUpkeepRunner(Protocol):
    """Runs scheduled memory upkeep off the scheduler (a Ray task each), answering its totals.

    Failures raise (``WonderError`` for expected ones): the scheduler records them on the entry."""

    async def agent(
        self, agent_id: str, client_id: str, policy: MemoryUpkeepPolicy, now: datetime
    ) -> JsonObject:
        """Consolidation and retention of one agent's memories (``jobs.upkeep``)."""
        ...

    async def compact(self) -> JsonObject:
        """Indexes and compaction of the memories table (``jobs.compact``)."""
        ...


class ClusterView(Protocol):
    """What operators see of the running cluster (``GET /v1/operations``)."""

    async def residency(self) -> JsonObject:
        """The conversation directory's figures and its resident actors."""
        ...

    async def model_deployments(self) -> list[JsonObject]:
        """The model deployments: application, name, status, replicas by state."""
        ...


class Residency(Protocol):
    """What a Conversation actor asks of the directory that keeps resident actors bounded."""

    async def release_idle(self, conversation_id: str) -> bool: ...

    def note_idle(self, conversation_id: str) -> None:
        """The actor has nothing left to do now (its last turn ended): at the cap it is the
        first to make room. Best effort: nothing waits for it."""
        ...


class EventListeners(Protocol):
    """Where a conversation's writers hand the events they appended, and the token deltas of
    replies in flight: the processes whose subscribers follow that conversation. Best effort and
    never waited for (the store holds every durable event; subscribers read what they miss)."""

    def publish(self, conversation_id: str, frames: Sequence[JsonObject]) -> None: ...


class AsyncOperations(Protocol):
    """The runner of async tool calls (they outlive their conversation actor)."""

    async def start(self, op_id: str, agent_id: str) -> None: ...

    async def running(self) -> frozenset[str]: ...


class WorkflowRuns(Protocol):
    """Starting, watching and cancelling workflow runs (rules in the coordinator package)."""

    async def start(
        self,
        workflow_id: str,
        input: JsonObject,
        version: int | None = None,
        parent: RunParent | None = None,
        *,
        client_id: str | None = None,
        run_id: str | None = None,
        project_id: str | None = None,
    ) -> str: ...

    async def rerun(
        self,
        run_id: str,
        from_node: str,
        node_input: JsonObject | None = None,
        *,
        client_id: str | None = None,
    ) -> str: ...

    async def wait(self, run_id: str, timeout_s: float | None = None) -> WorkflowRun: ...

    async def cancel(self, run_id: str, reason: str = "cancelled") -> WorkflowRun: ...

    def get(self, run_id: str, client_id: str | None = None) -> WorkflowRun: ...

    def history(self, run_id: str) -> list[NodeRecord]: ...

    async def run_to_end(
        self,
        workflow_id: str,
        input: JsonObject,
        parent: RunParent | None = None,
        version: int | None = None,
        timeout_s: float | None = None,
    ) -> TaskOutcome: ...

    async def reserved_run_id(self) -> str | None:
        """A run id whose coordinator is already up, when the reserve has one."""
        ...

    def prepare(self) -> None:
        """Get ready to start runs from this process soon (wakes the coordinator reserve)."""
        ...


class Coordinators(Protocol):
    """The runtime side of workflow runs: coordinator actors by run id, and their reserve."""

    async def launch(self, run_id: str) -> None:
        """Get or create the run's coordinator and start it (the run row exists)."""
        ...

    def is_live(self, run_id: str) -> bool: ...

    def revive(self, run_id: str) -> None:
        """Create the coordinator of a run whose coordinator is gone (it resumes the run);
        returns at once."""
        ...

    async def wait(self, run_id: str, timeout_s: float | None) -> None:
        """Wait on a live coordinator, across its restarts (returns at once when there is
        none)."""
        ...

    async def cancel(self, run_id: str, reason: str) -> None: ...

    async def reserved_run_id(self) -> str | None: ...

    def wake_reserve(self) -> None: ...


class ActorHost(Protocol):
    """How the conversation directory creates, evicts and stops conversation actors."""

    def create(self, conversation_id: str, held: Collection[str]) -> Any:
        """Get or create the conversation's actor; returns its handle at once. ``held``: the
        conversations whose actors the directory holds now (where those are decides where a new
        one goes)."""
        ...

    async def ready(self, handle: Any) -> None:
        """Return once the actor is constructed (raise if it failed to start)."""
        ...

    async def try_hibernate(self, handle: Any) -> bool:
        """Ask an actor to agree to eviction (a dead or wedged one agrees)."""
        ...

    async def shut_down(self, handle: Any, reason: str) -> None: ...

    def kill(self, handle: Any) -> None: ...


class Workspaces(Protocol):
    """A branch's workspace (its worktree): sandboxed commands and ``repo.*``.

    Paths are relative to the worktree; one that leaves it is a ``PermissionDenied``.
    """

    async def exec(
        self,
        spec: WorkspaceSpec,
        command: str,
        timeout_s: float,
        policy: SandboxPolicy,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` in the workspace's sandbox; ``env``: extra environment variables of
        the command (resolved secrets: never logged, never in an argument vector)."""
        ...

    async def tree(self, spec: WorkspaceSpec, path: str, max_entries: int) -> RepoTree: ...

    async def read(self, spec: WorkspaceSpec, path: str, max_bytes: int) -> RepoFile: ...

    async def write(self, spec: WorkspaceSpec, path: str, content: str) -> RepoFile: ...

    async def search(
        self, spec: WorkspaceSpec, pattern: str, path: str, max_hits: int
    ) -> RepoSearch: ...

    async def diff(self, spec: WorkspaceSpec, base: str | None) -> RepoDiff: ...

    async def commit(self, spec: WorkspaceSpec, message: str, author: str | None) -> RepoCommit: ...

    async def status(self, spec: WorkspaceSpec) -> WorkspaceStatus: ...

    async def remove(self, spec: WorkspaceSpec) -> None:
        """Remove the workspace's worktree and stop its actor (its owner was deleted)."""
        ...


class Lifecycle(Protocol):
    """An actor's own end: leave the cluster once its work is done."""

    def exit(self) -> None: ...


RunParent = ConversationParent | WorkflowParent
