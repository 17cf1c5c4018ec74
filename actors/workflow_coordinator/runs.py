"""Starting, watching and cancelling workflow runs: the rules (``WorkflowRuns`` over a store and
the ``Coordinators`` port that runs coordinator actors).

``start`` validates the input against the workflow's schema, bounds subworkflow nesting, inherits
the parent's context and client, writes the run row and launches the run's coordinator, returning
once the start tokens are dispatched. A run's status, output, events
(``workflow_started|resumed|completed|failed``) and node history are in the store, readable after
its coordinator has exited; ``wait`` asks a live coordinator and falls back to the store.

Who re-creates a lost coordinator: Ray restarts one whose process or node died
(``cluster.workflows``); one that is gone for good while its run is ``running`` (killed without a
restart, its actor lost with the cluster's) is re-created by the next ``get``, ``wait`` or
``cancel`` of the run. The new coordinator resumes the run from the store
(``actors.workflow_coordinator.resumption``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from actors.workflow_coordinator.rerun import rerun_plan
from core.errors import (
    Conflict,
    ErrorCode,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    WonderError,
)
from core.ids import new_id, utc_now
from core.json_schemas import errors as schema_errors
from core.jsontypes import JsonObject
from core.llm.recording import link_turn
from core.ports import Coordinators, RunParent, TaskOutcome, failed_outcome
from core.projects import start_run_branch
from core.settings import Settings
from core.store import Store
from core.tracing import current_traceparent
from core.turn_quotas import StoredQuotas, default_quota
from core.workflows import (
    ConversationParent,
    NodeRecord,
    RerunOrigin,
    RunContext,
    RunError,
    RunStatus,
    WorkflowDef,
    WorkflowParent,
    WorkflowRun,
)

MAX_SUBWORKFLOW_DEPTH = 8
POLL_S = 0.05


def validate_input(schema: JsonObject | None, run_input: JsonObject) -> None:
    """``InvalidInput`` naming the first place where ``run_input`` breaks ``schema``."""
    if schema is None:
        return
    found = schema_errors(schema, run_input)
    if found:
        where = "/".join(str(p) for p in found[0].absolute_path) or "input"
        raise InvalidInput(f"{where}: {found[0].message}")


@dataclass(frozen=True)
class RunLimits:
    """The operator's bounds on runs: subworkflow nesting, the largest ``max_tokens`` (node
    executions) a run may have, and each client's ``concurrent_runs`` quota (``quotas``)."""

    max_depth: int = MAX_SUBWORKFLOW_DEPTH
    max_nodes: int = 1_000_000
    quotas: StoredQuotas | None = None

    @classmethod
    def of(cls, store: Store, settings: Settings) -> RunLimits:
        quotas = StoredQuotas(store, defaults=default_quota(settings))
        return cls(settings.workflow_max_depth, settings.workflow_max_nodes_per_run, quotas)


class WorkflowRunService:
    """``WorkflowRuns``: what the gateway, conversations and coordinators use to run workflows."""

    def __init__(
        self, store: Store, coordinators: Coordinators, limits: RunLimits | None = None
    ) -> None:
        self.store = store
        self.runs = store.workflow_runs
        self.coordinators = coordinators
        self.limits = limits or RunLimits()

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
    ) -> str:
        """Start a run of ``workflow_id`` (latest version unless ``version``); returns its run id.

        With ``project_id`` (a run nobody started: no ``parent``) the run gets its own branch
        ``wonder/run-<run_id>`` from the project's default branch, created before the run row.

        A ``run_id`` already stored for the same ``parent`` is that run, started again if it is
        still pending (its starter was lost between storing it and launching its coordinator:
        a subworkflow node re-attaching after its coordinator's crash); nothing else is checked.

        Raises:
            NotFound: no such workflow (version), or no such ``project_id`` of the client's.
            InvalidInput: ``input`` does not match the workflow's ``input_schema``; a
                ``project_id`` given with a ``parent`` (that run works on its parent's).
            PermissionDenied: subworkflows nested deeper than the operator allows
                (``WONDER_WORKFLOW_MAX_DEPTH``), or a ``max_tokens`` above
                ``WONDER_WORKFLOW_MAX_NODES_PER_RUN``.
            QuotaExceeded: the client's ``concurrent_runs`` are all in use.
            Conflict: ``run_id`` is another parent's run.
        """
        stored = self._stored(run_id) if run_id is not None else None
        if stored is not None:
            if stored.parent != parent:
                raise Conflict(f"run id {stored.id} is taken")
            if stored.status is RunStatus.PENDING:
                await self._launch(stored.id)
            return stored.id
        depth, context = 0, RunContext()
        match parent:
            case WorkflowParent(run_id=parent_run_id):
                parent_run = self.runs.get(parent_run_id)
                depth, context = parent_run.depth + 1, parent_run.context
                client_id = client_id or parent_run.client_id
            case ConversationParent():
                conversation = self.store.conversations.get(parent.conversation_id)
                context = RunContext(
                    conversation_id=parent.conversation_id,
                    agent_id=parent.agent_id,
                    turn_id=parent.turn_id,
                    project_id=conversation.project_id,
                    branch=conversation.branch,
                )
                client_id = client_id or conversation.client_id
            case None:
                pass
        if project_id is not None and parent is not None:
            raise InvalidInput("project_id: a run with a parent works on its parent's branch")
        # The client's own workflow with that id, else the system's (issue 13).
        definition = self.store.workflows.get(workflow_id, version, client_id=client_id)
        if not isinstance(input, dict):
            raise InvalidInput("workflow input must be an object")
        if depth > self.limits.max_depth:
            raise PermissionDenied(f"subworkflows nest at most {self.limits.max_depth} deep")
        # A client's schema is validated off the event loop (its patterns run on RE2).
        await asyncio.to_thread(self._admit, definition, input, client_id)
        if run_id is None:
            run_id = await self.coordinators.reserved_run_id() or new_id("run")
        if project_id is not None:  # the branch first: a run never names a missing branch
            branch = await asyncio.to_thread(
                start_run_branch, self.store, client_id or "", project_id, run_id
            )
            context = RunContext(project_id=project_id, branch=branch)
        run = WorkflowRun(
            id=run_id,
            workflow_id=definition.id,
            workflow_version=definition.version,
            input=input,
            parent=parent,
            client_id=client_id,
            context=context,
            depth=depth,
            created_at=utc_now(),
            trace=current_traceparent(),  # the starting span: the run joins its trace
        )
        self.runs.insert(run)
        if isinstance(parent, ConversationParent):
            link_turn(
                parent.turn_id,
                "workflow_run",
                run.id,
                parent.conversation_id,
                workflow_id=definition.id,
                version=definition.version,
            )
        await self._launch(run.id)
        return run.id

    async def rerun(
        self,
        run_id: str,
        from_node: str,
        node_input: JsonObject | None = None,
        *,
        client_id: str | None = None,
    ) -> str:
        """Start a new run of ``run_id``'s workflow version with its input, re-running
        ``from_node`` and what it reaches; the other nodes take the recorded outputs of
        ``run_id`` (``rerun``). ``node_input`` replaces ``from_node``'s input. Returns the new
        run's id; ``run_id`` itself is not changed.

        Raises:
            NotFound: no such run (of ``client_id``'s), or no such node in its workflow.
            Conflict: the run has not ended; it works on a project branch (its nodes' changes
                to the branch are not recorded); it never reached ``from_node``, or a visit
                upstream of it did not complete (no recorded output to reuse).
            QuotaExceeded: the client's ``concurrent_runs`` are all in use.
        """
        original = self.runs.get(run_id, client_id)
        definition = self.store.workflows.get(
            original.workflow_id, original.workflow_version, client_id=original.client_id
        )
        if from_node not in {node.id for node in definition.nodes}:
            raise NotFound(f"node {from_node} not found in workflow {definition.id}")
        if not original.status.terminal:
            raise Conflict(
                f"run {run_id} is {original.status.value}: re-run it from a node once it has ended"
            )
        if original.context.project_id is not None:
            raise Conflict(
                f"run {run_id} works on a project branch, whose changes by its nodes are not "
                "recorded: it cannot be re-run from a node"
            )
        records = self.runs.history(run_id)
        rerun_plan(definition, run_id, records, from_node, node_input)  # refuses what it cannot
        await asyncio.to_thread(self._admit, definition, original.input, original.client_id)
        new_run_id = await self.coordinators.reserved_run_id() or new_id("run")
        run = WorkflowRun(
            id=new_run_id,
            workflow_id=definition.id,
            workflow_version=definition.version,
            input=original.input,
            client_id=original.client_id,
            context=original.context,
            created_at=utc_now(),
            trace=current_traceparent(),
            rerun_of=RerunOrigin(run_id=run_id, node_id=from_node, node_input=node_input),
        )
        self.runs.insert(run)
        await self._launch(run.id)
        return run.id

    def _stored(self, run_id: str) -> WorkflowRun | None:
        try:
            return self.runs.get(run_id)
        except NotFound:
            return None

    def _admit(self, definition: WorkflowDef, run_input: JsonObject, client_id: str | None) -> None:
        """The input against the schema, the run's size against the operator's bound, one
        more run against the client's ``concurrent_runs`` quota."""
        validate_input(definition.input_schema, run_input)
        if definition.max_tokens > self.limits.max_nodes:
            raise PermissionDenied(
                f"workflow {definition.id} allows max_tokens {definition.max_tokens}; this "
                f"deployment runs at most {self.limits.max_nodes} node executions per run "
                "(WONDER_WORKFLOW_MAX_NODES_PER_RUN)"
            )
        if client_id is not None and self.limits.quotas is not None:
            refusal = self.limits.quotas.run_refusal(client_id)
            if refusal is not None:
                raise QuotaExceeded(refusal.message, retry_after_s=refusal.retry_after_s)

    async def _launch(self, run_id: str) -> None:
        try:
            await self.coordinators.launch(run_id)
        except Exception as exc:
            self._fail_unstarted(run_id, f"the coordinator did not start: {exc}")
            raise

    def _fail_unstarted(self, run_id: str, message: str) -> WorkflowRun:
        run = self.runs.get(run_id)
        if run.status is not RunStatus.PENDING:  # it started: its coordinator owns it
            return run
        failed = run.model_copy(
            update={
                "status": RunStatus.FAILED,
                "finished_at": utc_now(),
                "error": RunError(code="INTERNAL_ERROR", message=message, retriable=True),
            }
        )
        return self.runs.save(failed)

    def get(self, run_id: str, client_id: str | None = None) -> WorkflowRun:
        """The stored run. A running run whose coordinator is gone gets a new one, which
        resumes it (the run is answered as stored)."""
        run = self.runs.get(run_id, client_id)
        if run.status is RunStatus.RUNNING and not self.coordinators.is_live(run_id):
            self.coordinators.revive(run_id)
        return run

    def history(self, run_id: str) -> list[NodeRecord]:
        """The run's node history: one record per token, in creation order."""
        return self.runs.history(run_id)

    async def wait(self, run_id: str, timeout_s: float | None = None) -> WorkflowRun:
        """The run once it has ended (or as it stands after ``timeout_s``)."""
        self.get(run_id)  # a coordinator that is gone is re-created first
        await self.coordinators.wait(run_id, timeout_s)
        run = self.get(run_id)
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while not run.status.terminal and run.started_at is None:
            if deadline is not None and loop.time() > deadline:
                break
            await asyncio.sleep(POLL_S)  # created, not yet started by its coordinator
            run = self.get(run_id)
        return run

    async def cancel(self, run_id: str, reason: str = "cancelled") -> WorkflowRun:
        """Cancel a run and its live work (subworkflows too); a finished run is left as it is."""
        self.get(run_id)
        await self.coordinators.cancel(run_id, reason)
        return self.get(run_id)

    async def run_to_end(
        self,
        workflow_id: str,
        input: JsonObject,
        parent: RunParent | None = None,
        version: int | None = None,
        timeout_s: float | None = None,
    ) -> TaskOutcome:
        """Run a workflow and answer like a task: the output, or a business error.

        Used by a conversation's workflow tools: business errors (not found, invalid input, a
        failed run) come back as outcomes; infrastructure errors raise so the tool's retry policy
        applies.
        """
        try:
            run_id = await self.start(workflow_id, input, version, parent)
        except WonderError as exc:
            if exc.retriable:
                raise
            return TaskOutcome.failed(exc)
        try:
            run = await self.wait(run_id, timeout_s)
        except asyncio.CancelledError:  # the caller gave up (a tool timeout): so does the run
            await asyncio.shield(self.cancel(run_id, "the caller stopped waiting"))
            raise
        if run.status is RunStatus.COMPLETED:
            return TaskOutcome.ok(run.output)
        if not run.status.terminal:
            await self.cancel(run_id, "timed out")
            message = f"workflow run {run_id} timed out"
            return failed_outcome(ErrorCode.TIMEOUT, message, retriable=True)
        cause = run.error.message if run.error else run.status.value
        return failed_outcome(ErrorCode.EXECUTION_FAILED, f"workflow {workflow_id} failed: {cause}")

    async def reserved_run_id(self) -> str | None:
        return await self.coordinators.reserved_run_id()

    def prepare(self) -> None:
        self.coordinators.wake_reserve()
