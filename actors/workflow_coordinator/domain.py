"""The WorkflowCoordinator's run state, its events (past tense) and its decisions (imperative).

A run is a set of *tokens*. A token sits on one node: ``running`` while the coordinator prepares
it, ``waiting_for_task|subworkflow|agent`` while the node's work is out, then ``done`` or
``failed`` (or ``cancelled`` when a run fails or an any/n join no longer needs it). A token's
``branch`` lists the fan-outs it belongs to, innermost last: ``(group_id, index)`` pairs. Groups
record how many branches a fan-out spawned; joins record which branch indices have arrived.

Events carry everything from outside the pure core: results, errors, and the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from actors.workflow_coordinator.rerun import RerunPlan
from core.jsontypes import JsonObject
from core.workflows import RunStatus, WorkflowDef, WorkflowGraph


class TokenState(StrEnum):
    RUNNING = "running"
    WAITING_FOR_TASK = "waiting_for_task"
    WAITING_FOR_SUBWORKFLOW = "waiting_for_subworkflow"
    WAITING_FOR_AGENT = "waiting_for_agent"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def live(self) -> bool:
        return self not in (TokenState.DONE, TokenState.FAILED, TokenState.CANCELLED)


@dataclass(frozen=True, slots=True)
class NodeError:
    code: str
    message: str
    retriable: bool = False


@dataclass(frozen=True, slots=True)
class BranchStep:
    group_id: str
    index: int


@dataclass(frozen=True, slots=True)
class Token:
    id: str
    seq: int
    node_id: str
    state: TokenState
    created_at: datetime
    parent_id: str | None = None
    branch: tuple[BranchStep, ...] = ()
    item: Any = None
    index: int | None = None
    branches: tuple[Any, ...] | None = None  # a join token: the arrived branches' outputs
    from_foreach: bool = False  # first token of a foreach branch (default input: the item)
    input: Any = None
    output: Any = None
    error: NodeError | None = None
    attempt: int = 0
    finished_at: datetime | None = None
    reused_from: str | None = None  # a re-run's token that took the original's recorded output


def fanout_group_id(origin: Token) -> str:
    """The id of the fan-out group ``origin`` starts (one per token, derived from its seq)."""
    return f"g{origin.seq}"


@dataclass(frozen=True, slots=True)
class Group:
    """One fan-out: ``size`` branches spawned when ``origin_token_id`` finished."""

    id: str
    size: int
    origin_token_id: str
    join_node_id: str | None  # static guess, for fan-outs where no branch reaches a join


@dataclass(slots=True)
class JoinState:
    node_id: str
    group_id: str
    arrivals: dict[int, Any] = field(default_factory=dict)  # branch index -> output
    fired: bool = False


@dataclass(slots=True)
class RunState:
    """Everything planning needs about one run. Mutated only by ``planning.apply``."""

    run_id: str
    workflow: WorkflowDef
    input: JsonObject
    graph: WorkflowGraph
    status: RunStatus = RunStatus.PENDING
    tokens: dict[str, Token] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    groups: dict[str, Group] = field(default_factory=dict)
    joins: dict[tuple[str, str], JoinState] = field(default_factory=dict)
    next_seq: int = 1
    output: Any = None
    error: NodeError | None = None
    failed_node: tuple[str, str] | None = None  # (node_id, token_id) that failed the run
    rerun: RerunPlan | None = None  # a re-run from a node: the recorded visits it reuses

    @classmethod
    def new(cls, run_id: str, workflow: WorkflowDef, run_input: JsonObject) -> RunState:
        return cls(run_id=run_id, workflow=workflow, input=run_input, graph=WorkflowGraph(workflow))

    def copy(self) -> RunState:
        """A copy planning may change freely (tokens are immutable; joins are copied)."""
        return RunState(
            run_id=self.run_id,
            workflow=self.workflow,
            input=self.input,
            graph=self.graph,
            status=self.status,
            tokens=dict(self.tokens),
            live=set(self.live),
            groups=dict(self.groups),
            joins={
                key: JoinState(j.node_id, j.group_id, dict(j.arrivals), j.fired)
                for key, j in self.joins.items()
            },
            next_seq=self.next_seq,
            output=self.output,
            error=self.error,
            failed_node=self.failed_node,
            rerun=self.rerun,
        )


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class RunStarted:
    at: datetime


@dataclass(frozen=True, slots=True)
class NodeSucceeded:
    token_id: str
    output: Any
    at: datetime


@dataclass(frozen=True, slots=True)
class NodeFailed:
    token_id: str
    error: NodeError
    at: datetime


@dataclass(frozen=True, slots=True)
class RunCancelled:
    reason: str
    at: datetime


@dataclass(frozen=True, slots=True)
class RunResumed:
    """A re-created coordinator took the run over from the store (``resumption``: 1 the first
    time). ``idempotent_nodes``: the task nodes whose task is declared idempotent."""

    resumption: int
    idempotent_nodes: frozenset[str]
    at: datetime


WorkflowEvent = RunStarted | NodeSucceeded | NodeFailed | RunCancelled | RunResumed


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class StartRun:
    at: datetime


@dataclass(frozen=True, slots=True)
class CreateToken:
    token: Token


@dataclass(frozen=True, slots=True)
class CreateGroup:
    group: Group


@dataclass(frozen=True, slots=True)
class RecordArrival:
    node_id: str
    group_id: str
    index: int
    output: Any


@dataclass(frozen=True, slots=True)
class FireJoin:
    node_id: str
    group_id: str


@dataclass(frozen=True, slots=True)
class DispatchTask:
    token_id: str
    task_id: str
    task_version: int | None
    input: JsonObject
    attempt: int
    delay_ms: int = 0
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class StartSubworkflow:
    """Run a child workflow; ``reattach``: wait for the child this attempt already recorded
    (a resumed run) instead of starting another."""

    token_id: str
    workflow_id: str
    workflow_version: int | None
    input: JsonObject
    attempt: int
    delay_ms: int = 0
    timeout_s: float | None = None
    reattach: bool = False


@dataclass(frozen=True, slots=True)
class CallAgent:
    """Run one turn of an agent: in ``conversation_id`` when given, else (delegate) in a fresh
    child conversation of agent ``agent_id``."""

    token_id: str
    agent_id: str | None
    conversation_id: str | None
    input: JsonObject
    mode: Literal["delegate", "loop_in"]
    attempt: int
    delay_ms: int = 0
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class CompleteToken:
    """``reused_from``: a re-run's token completed with the original run's recorded visit."""

    token_id: str
    input: Any
    output: Any
    at: datetime
    reused_from: str | None = None


@dataclass(frozen=True, slots=True)
class FailToken:
    token_id: str
    error: NodeError
    at: datetime


@dataclass(frozen=True, slots=True)
class CancelToken:
    token_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class CompleteRun:
    output: Any
    at: datetime


@dataclass(frozen=True, slots=True)
class FailRun:
    error: NodeError
    at: datetime
    node_id: str | None = None
    token_id: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRun:
    reason: str
    at: datetime


@dataclass(frozen=True, slots=True)
class ResumeRun:
    """Record that the run was taken over by a re-created coordinator (its ``resumption``-th)."""

    resumption: int
    at: datetime


Dispatch = DispatchTask | StartSubworkflow | CallAgent

Decision = (
    StartRun
    | CreateToken
    | CreateGroup
    | RecordArrival
    | FireJoin
    | DispatchTask
    | StartSubworkflow
    | CallAgent
    | CompleteToken
    | FailToken
    | CancelToken
    | CompleteRun
    | FailRun
    | CancelRun
    | ResumeRun
)
