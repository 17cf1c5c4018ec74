"""The WorkflowCoordinator actor: the effectful shell around ``planning`` for one run.

Named ``workflow:<run_id>`` (namespace ``wonder``, detached, ``num_cpus=0``, async), created
through ``WorkflowRunService.start`` after the run row exists. Each step: plan the event(s) →
apply the decisions to the state → persist the run row and every touched token in one transaction
(intent first) → perform the effects (submit executor tasks, start child runs, call agents) →
their outcomes come back as events. Events that arrive together are planned as one batch, so a
fan-out of N tokens costs one store write for its dispatch, not N.

When the run ends its result and node history stay in the store and the actor exits, after the
callers blocked in ``wait`` have had their answer.

A coordinator that is lost mid-run (its process or node dies) is re-created: by Ray, which
restarts it (``cluster.workflows``), or by the next caller that waits on, reads or cancels the
run and finds no coordinator (``WorkflowRunService``). Either way the new one finds its run
``running`` in the store when it is constructed, rebuilds the state from the node history and
resumes the run (``resumption``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from actors.workflow_coordinator.domain import (
    CallAgent,
    CancelRun,
    CancelToken,
    CompleteRun,
    CreateGroup,
    CreateToken,
    Decision,
    DispatchTask,
    FailRun,
    FireJoin,
    NodeError,
    NodeFailed,
    NodeSucceeded,
    RecordArrival,
    ResumeRun,
    RunCancelled,
    RunResumed,
    RunStarted,
    RunState,
    StartRun,
    StartSubworkflow,
    TokenState,
    WorkflowEvent,
)
from actors.workflow_coordinator.planning import apply, plan
from actors.workflow_coordinator.ports import CoordinatorPorts, CoordinatorPortsFactory
from actors.workflow_coordinator.records import fanout_of, node_record, restored_state, run_error
from actors.workflow_coordinator.rerun import rerun_plan
from actors.workflow_coordinator.resumption import RESUMED_EVENT, agent_call_ids
from actors.workflow_coordinator.run_spans import RunTrace
from core.conversations import create_conversation
from core.domain import TaskDef, TurnStatus, WorkflowCaller
from core.errors import ErrorCode, NotFound, WonderError
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.ports import TaskContext
from core.projects import delegated_workplace
from core.workflows import RunEvent, RunStatus, WorkflowParent, WorkflowRun

log = logging.getLogger("wonder.workflows")

RUN_DECISIONS = (StartRun, CompleteRun, FailRun, CancelRun, ResumeRun)
EXIT_GRACE_S = 0.2


class WorkflowCoordinator:
    """One run of a workflow graph. Plain Python; ``cluster.workflows`` applies ``ray.remote``."""

    def __init__(self, run_id: str, ports: CoordinatorPortsFactory) -> None:
        # Nothing run-specific is read here: a coordinator may be created ahead of its run (the
        # reserve in ``cluster.workflows``) and meets its run row at ``start``.
        self.run_id = run_id
        self.ports: CoordinatorPorts = ports()
        self.store = self.ports.store
        self.runs = self.store.workflow_runs
        self._run: WorkflowRun | None = None
        self._state: RunState | None = None
        self._queue: list[WorkflowEvent] = []
        self._drain_scheduled = False
        self._inflight: dict[str, asyncio.Task[Any]] = {}  # token id -> its work
        self._child_runs: dict[str, str] = {}  # token id -> child run id
        self._tasks: dict[tuple[str, int | None], TaskDef] = {}
        self._finished: asyncio.Event | None = None
        self._waiters = 0
        self._background: set[asyncio.Task[Any]] = set()
        self._taken_over = False
        self._trace: RunTrace | None = None
        try:
            # Under Ray an async actor is constructed on its event loop: a coordinator re-created
            # for a run that was running resumes it at once, without waiting for a caller. Built
            # without a loop (tests), the first call does it.
            asyncio.get_running_loop().call_soon(self._take_over)
        except RuntimeError:
            pass

    @property
    def run(self) -> WorkflowRun:
        if self._run is None:
            self._run = self.runs.get(self.run_id)
        return self._run

    @run.setter
    def run(self, value: WorkflowRun) -> None:
        self._run = value

    @property
    def state(self) -> RunState:
        if self._state is None:
            run = self.run
            workflow = self.store.workflows.get(
                run.workflow_id, run.workflow_version, client_id=run.client_id
            )
            if run.status is RunStatus.PENDING:
                self._state = RunState.new(self.run_id, workflow, run.input)
            else:  # a run a previous coordinator worked on: as its records left it
                records = self.runs.history(self.run_id)
                self._child_runs = {r.token_id: r.child_run_id for r in records if r.child_run_id}
                self._state = restored_state(run, workflow, records)
            origin = run.rerun_of
            if origin is not None:  # a re-run: the original's recorded visits it reuses
                self._state.rerun = rerun_plan(
                    workflow,
                    origin.run_id,
                    self.runs.history(origin.run_id),
                    origin.node_id,
                    origin.node_input,
                )
        return self._state

    def _take_over(self) -> None:
        """Resume the run if a lost coordinator left it running (once; every entry point asks)."""
        if self._taken_over:
            return
        try:
            run = self.runs.get(self.run_id)
        except NotFound:
            return  # reserved ahead of its run: ``start`` comes
        self._taken_over = True
        self._run = run
        if run.status.terminal:  # it ended, and its coordinator was lost before it exited
            self._finished_event().set()
            self._background_task(self._exit_when_answered())
        elif run.status is RunStatus.RUNNING:
            resumption = sum(1 for e in run.events if e.type == RESUMED_EVENT) + 1
            log.warning("workflow run %s: resumed (%d)", self.run_id, resumption)
            self._handle([RunResumed(resumption, self._idempotent_waiting(), utc_now())])

    def _idempotent_waiting(self) -> frozenset[str]:
        """The nodes with a task out whose task is declared idempotent (may run again)."""
        nodes: set[str] = set()
        for token_id in self.state.live:
            token = self.state.tokens[token_id]
            node = self.state.graph.node(token.node_id)
            if token.state is not TokenState.WAITING_FOR_TASK or node.target_id is None:
                continue
            try:
                if self._task(node.target_id, node.target_version).idempotent:
                    nodes.add(node.id)
            except WonderError:
                pass  # gone from the library: not known to be idempotent
        return frozenset(nodes)

    # ------------------------------------------------------------------ entry points

    async def ready(self) -> bool:
        """Answered once the actor is up (the reserve waits for this before offering it)."""
        return True

    async def start(self) -> JsonObject:
        """Start the run (idempotent): the start tokens are dispatched when this returns."""
        self._take_over()
        if self.run.status is RunStatus.PENDING:
            if any(node.kind == "subworkflow" for node in self.state.workflow.nodes):
                self.ports.workflows.prepare()  # children can then start on ready coordinators
            self._handle([RunStarted(utc_now())])
        return {"run_id": self.run_id, "status": self.run.status.value}

    async def wait(self, timeout_s: float | None = None) -> JsonObject:
        """The run record once the run has ended (or as it is after ``timeout_s``)."""
        self._take_over()
        self._waiters += 1
        try:
            if not self.run.status.terminal:
                await asyncio.wait_for(self._finished_event().wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            self._waiters -= 1
        return self.run.model_dump(mode="json")

    async def cancel(self, reason: str = "cancelled") -> JsonObject:
        self._take_over()
        self._handle([RunCancelled(reason, utc_now())])
        return self.run.model_dump(mode="json")

    async def status(self) -> JsonObject:
        """The run plus its live tokens, and this coordinator's process (operators, tests)."""
        self._take_over()
        live = [
            {"token_id": t.id, "node_id": t.node_id, "state": t.state.value}
            for t in (self.state.tokens[i] for i in sorted(self.state.live))
        ]
        return {"run": self.run.model_dump(mode="json"), "live": live, "pid": os.getpid()}

    # ------------------------------------------------------------------ the step

    def _finished_event(self) -> asyncio.Event:
        if self._finished is None:
            self._finished = asyncio.Event()
            if self.run.status.terminal:
                self._finished.set()
        return self._finished

    def _post(self, event: WorkflowEvent) -> None:
        """Queue an outcome; everything queued before the loop gets to it is planned together."""
        self._queue.append(event)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        events, self._queue = self._queue, []
        if events:
            self._handle(events)

    def _handle(self, events: list[WorkflowEvent]) -> None:
        decisions: list[Decision] = []
        for event in events:
            planned = plan(self.state, event)
            for decision in planned:
                apply(self.state, decision)
            decisions.extend(planned)
        if not decisions:
            return
        self._persist(decisions)
        for decision in decisions:
            self._perform(decision)

    def _persist(self, decisions: list[Decision]) -> None:
        created: dict[str, None] = {}
        touched: dict[str, None] = {}
        run_changed = False
        for decision in decisions:
            if isinstance(decision, CreateToken):
                created[decision.token.id] = None
            elif isinstance(decision, RUN_DECISIONS):
                run_changed = True
                self._update_run(decision)
            token_id = self._record_touched(decision)
            if token_id is not None and token_id not in created:
                touched[token_id] = None
        self.runs.record(
            self.run if run_changed else None,
            [self._record(t) for t in created],
            [self._record(t) for t in touched],
        )

    def _record_touched(self, decision: Decision) -> str | None:
        """The token whose history record ``decision`` changes: its own, or for a fan-out's
        group and joins, the record of the token that fanned out."""
        if isinstance(decision, CreateGroup):
            return decision.group.origin_token_id
        if isinstance(decision, RecordArrival | FireJoin):
            return self.state.groups[decision.group_id].origin_token_id
        token_id: str | None = getattr(decision, "token_id", None)
        return token_id

    def _record(self, token_id: str) -> Any:
        token = self.state.tokens[token_id]
        kind = self.state.graph.node(token.node_id).kind
        child = self._child_runs.get(token_id)
        return node_record(self.run_id, token, kind, child, fanout_of(self.state, token))

    def _update_run(self, decision: Decision) -> None:
        run = self.run
        match decision:
            case StartRun(at=at):
                run = run.model_copy(
                    update={
                        "status": RunStatus.RUNNING,
                        "started_at": at,
                        "events": [
                            *run.events,
                            RunEvent(
                                type="workflow_started",
                                at=at,
                                payload={"workflow_id": run.workflow_id},
                            ),
                        ],
                    }
                )
            case ResumeRun(at=at, resumption=resumption):
                event = RunEvent(type=RESUMED_EVENT, at=at, payload={"resumption": resumption})
                run = run.model_copy(update={"events": [*run.events, event]})
            case CompleteRun(at=at, output=output):
                run = run.model_copy(
                    update={
                        "status": RunStatus.COMPLETED,
                        "output": output,
                        "finished_at": at,
                        "events": [*run.events, RunEvent(type="workflow_completed", at=at)],
                    }
                )
            case FailRun(at=at) | CancelRun(at=at):
                status = RunStatus.FAILED if isinstance(decision, FailRun) else RunStatus.CANCELLED
                error = (
                    run_error(decision.error, decision.node_id, decision.token_id)
                    if isinstance(decision, FailRun)
                    else run_error(NodeError("CANCELLED", decision.reason))
                )
                run = run.model_copy(
                    update={
                        "status": status,
                        "error": error,
                        "finished_at": at,
                        "events": [
                            *run.events,
                            RunEvent(
                                type="workflow_failed", at=at, payload={"error": error.model_dump()}
                            ),
                        ],
                    }
                )
        self.run = run

    # ------------------------------------------------------------------ effects

    def _perform(self, decision: Decision) -> None:
        match decision:
            case DispatchTask():
                self._later(decision.token_id, decision.delay_ms, lambda: self._submit(decision))
            case StartSubworkflow():
                self._later(
                    decision.token_id,
                    decision.delay_ms,
                    lambda: self._spawn(decision.token_id, self._subworkflow(decision)),
                )
            case CallAgent():
                self._later(
                    decision.token_id,
                    decision.delay_ms,
                    lambda: self._spawn(decision.token_id, self._agent(decision)),
                )
            case CancelToken():
                self._cancel_work(decision.token_id)
            case CompleteRun() | FailRun() | CancelRun():
                self._run_ended(decision)
                self._finished_event().set()
                self._background_task(self._exit_when_answered())
            case _:
                pass  # state-only decisions: already applied and persisted

    def _later(self, token_id: str, delay_ms: int, submit: Callable[[], None]) -> None:
        if delay_ms <= 0:
            submit()
            return

        async def delayed() -> None:
            await asyncio.sleep(delay_ms / 1000)
            if self.state.tokens[token_id].state.live:
                submit()

        self._background_task(delayed())

    def _submit(self, decision: DispatchTask) -> None:
        try:
            task = self._task(decision.task_id, decision.task_version)
        except WonderError as exc:
            self._post(NodeFailed(decision.token_id, _node_error(exc), utc_now()))
            return
        self._spawn(decision.token_id, self._task_outcome(decision, task))

    def _task(self, task_id: str, version: int | None) -> TaskDef:
        key = (task_id, version)
        if key not in self._tasks:
            self._tasks[key] = self.store.tasks.get(task_id, version, client_id=self.run.client_id)
        return self._tasks[key]

    def _task_context(self, token_id: str | None = None) -> TaskContext:
        ctx = self.run.context
        node_id = self.state.tokens[token_id].node_id if token_id is not None else None
        return TaskContext(
            client_id=self.run.client_id,
            conversation_id=ctx.conversation_id,
            agent_id=ctx.agent_id,
            turn_id=ctx.turn_id,
            run_id=self.run_id,
            settings_env=self.ports.settings_env,
            node_id=node_id,
        )

    @property
    def trace(self) -> RunTrace:
        """The run's span (``run_spans``), made from the run row once it is known."""
        if self._trace is None:
            self._trace = RunTrace(self.run)
        return self._trace

    def _run_ended(self, decision: CompleteRun | FailRun | CancelRun) -> None:
        match decision:
            case CompleteRun():
                outcome, error = "completed", None
            case FailRun(error=failure):
                outcome, error = "failed", failure.message
            case CancelRun():
                outcome, error = "cancelled", None
        self.trace.ended(outcome, error)
        self.ports.metrics.workflow_run_ended(self.run.workflow_id, outcome)

    def _spawn(self, token_id: str, outcome: Awaitable[WorkflowEvent]) -> None:
        token = self.state.tokens[token_id]
        kind = self.state.graph.node(token.node_id).kind

        async def run() -> None:
            # The node's span is current while it runs: its task, agent turn or child run
            # joins the run's trace under it.
            with self.trace.node(token_id, token.node_id, kind) as span:
                event = await outcome
                if isinstance(event, NodeFailed):
                    span.fail(str(event.error.code), event.error.message)
            self._inflight.pop(token_id, None)
            self._post(event)

        self._inflight[token_id] = self._background_task(run())

    def _background_task(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _task_outcome(self, decision: DispatchTask, task: TaskDef) -> WorkflowEvent:
        token_id = decision.token_id
        try:
            outcome = await asyncio.wait_for(
                self.ports.tasks.run(task, decision.input, self._task_context(token_id)),
                decision.timeout_s,
            )
        except TimeoutError:
            message = f"task {decision.task_id} timed out after {decision.timeout_s}s"
            return NodeFailed(token_id, NodeError(ErrorCode.TIMEOUT, message, True), utc_now())
        except WonderError as exc:
            return NodeFailed(token_id, _node_error(exc), utc_now())
        if outcome.success:
            return NodeSucceeded(token_id, outcome.result, utc_now())
        error = outcome.error
        return NodeFailed(
            token_id,
            NodeError(
                str(error.code if error else ErrorCode.EXECUTION_FAILED),
                error.message if error else "task failed",
                error.retriable if error else False,
            ),
            utc_now(),
        )

    async def _subworkflow(self, decision: StartSubworkflow) -> WorkflowEvent:
        token_id = decision.token_id
        runs = self.ports.workflows
        try:
            child_id = self._child_runs.get(token_id) if decision.reattach else None
            if child_id is None:
                # The child's id is intent: recorded on the token before the child exists. A
                # reserved id comes with its coordinator already running.
                child_id = await runs.reserved_run_id() or new_id("run")
                self._child_runs[token_id] = child_id
                self.runs.record(None, [], [self._record(token_id)])
            # Stored and started, or stored (or not) and lost before it started: ``start``
            # knows the child by its id and starts what was not started.
            await runs.start(
                decision.workflow_id,
                decision.input,
                decision.workflow_version,
                parent=WorkflowParent(run_id=self.run_id, token_id=token_id),
                run_id=child_id,
            )
            child = await runs.wait(child_id, decision.timeout_s)
        except WonderError as exc:
            return NodeFailed(token_id, _node_error(exc), utc_now())
        if child.status is RunStatus.COMPLETED:
            return NodeSucceeded(token_id, child.output, utc_now())
        if not child.status.terminal:
            await runs.cancel(child_id, "timed out")
            message = f"subworkflow {decision.workflow_id} timed out after {decision.timeout_s}s"
            return NodeFailed(token_id, NodeError(ErrorCode.TIMEOUT, message, True), utc_now())
        cause = child.error.message if child.error else child.status.value
        message = f"subworkflow {decision.workflow_id} ({child_id}) failed: {cause}"
        return NodeFailed(token_id, NodeError(ErrorCode.EXECUTION_FAILED, message), utc_now())

    async def _agent(self, decision: CallAgent) -> WorkflowEvent:
        token_id = decision.token_id
        message_id, delegate_id = agent_call_ids(self.run_id, token_id, decision.attempt)
        conversation_id = decision.conversation_id
        try:
            if conversation_id is None:
                conversation_id = self._delegate_conversation(decision, delegate_id)
            text = decision.input.get("message", decision.input.get("input"))
            message = text if isinstance(text, str) else json.dumps(decision.input, default=str)
            caller = WorkflowCaller(run_id=self.run_id)
            # The same message id on a resumed run: the conversation answers with the turn it
            # started then, never a second one.
            answer = await asyncio.wait_for(
                self.ports.conversations.start_agent_call(
                    conversation_id,
                    message,
                    caller,
                    decision.mode,
                    agent_id=decision.agent_id if decision.mode == "loop_in" else None,
                    message_id=message_id,
                ),
                decision.timeout_s,
            )
        except TimeoutError:
            message = f"agent call timed out after {decision.timeout_s}s"
            return NodeFailed(token_id, NodeError(ErrorCode.TIMEOUT, message, True), utc_now())
        except WonderError as exc:
            return NodeFailed(token_id, _node_error(exc), utc_now())
        if answer.status is not TurnStatus.COMPLETED:
            reason = answer.failure_reason or answer.status.value
            message = f"agent turn in {answer.conversation_id} failed: {reason}"
            # Seed 001: an agent that declined is final; one that crashed may be asked again,
            # and one refused by a quota once the quota's window reopens (its reason says when).
            if answer.declined:
                error = NodeError(ErrorCode.AGENT_DECLINED, message)
            elif answer.over_quota:
                error = NodeError(ErrorCode.QUOTA_EXCEEDED, message, True)
            else:
                error = NodeError(ErrorCode.EXECUTION_FAILED, message, True)
            return NodeFailed(token_id, error, utc_now())
        output: JsonObject = {
            "answer": answer.content,
            "conversation_id": answer.conversation_id,
            "turn_id": answer.turn_id,
        }
        return NodeSucceeded(token_id, output, utc_now())

    def _delegate_conversation(self, decision: CallAgent, conversation_id: str) -> str:
        """A fresh child conversation of the target agent (delegate mode: a clean context),
        under the id this call derives (a resumed run finds the one it created), working on the
        run's branch when the agent is scoped to its project (it creates none)."""
        try:
            return self.store.conversations.get(conversation_id).id
        except NotFound:
            pass
        agent = self.store.agents.get(decision.agent_id or "", self.run.client_id)
        context = self.run.context
        project_id, branch = delegated_workplace(agent, context.project_id, context.branch)
        conversation = create_conversation(
            self.store,
            client_id=agent.client_id,
            agent_id=agent.id,
            title=f"workflow run {self.run_id} ({decision.token_id})",
            started_by_conversation_id=context.conversation_id,
            conversation_id=conversation_id,
            project_id=project_id,
            branch=branch,
        )
        return conversation.id

    def _cancel_work(self, token_id: str) -> None:
        work = self._inflight.pop(token_id, None)
        if work is not None:
            work.cancel()  # the task runner cancels the executor task with it
        child_id = self._child_runs.get(token_id)
        if child_id is not None:
            reason = f"parent run {self.run_id} cancelled it"
            self._background_task(self.ports.workflows.cancel(child_id, reason))

    async def _exit_when_answered(self) -> None:
        """Leave once blocked ``wait`` callers have their answer (the store keeps the rest)."""
        await asyncio.sleep(EXIT_GRACE_S)
        for _ in range(600):
            if self._waiters == 0 and len(self._background) <= 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(EXIT_GRACE_S)
        self.ports.lifecycle.exit()


def _node_error(exc: WonderError) -> NodeError:
    return NodeError(str(exc.code), exc.message, exc.retriable)
