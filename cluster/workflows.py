"""Starting, watching and cancelling workflow runs (the coordinator's factory lives here).

``start_workflow_run`` validates the input, writes the run row, creates the named detached actor
``workflow:<run_id>`` and returns once the start tokens are dispatched. The run's status, output,
events (``workflow_started|completed|failed``) and node history are in the store, readable after
the coordinator has exited; ``wait_for_run`` asks a live coordinator and falls back to the store.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray

from actors.stores import open_store
from actors.workflow_coordinator.actor import WorkflowCoordinator
from actors.workflow_coordinator.operations import WorkflowRunOps
from actors.workflow_coordinator.reserve import CoordinatorReserve
from core.errors import InvalidInput, PermissionDenied, WonderError
from core.ids import new_id, utc_now
from core.workflows import (
    ConversationParent,
    NodeRecord,
    RunContext,
    RunError,
    RunStatus,
    WorkflowParent,
    WorkflowRun,
)

NAMESPACE = "wonder"
RESERVE_NAME = "workflow-reserve"
MAX_SUBWORKFLOW_DEPTH = 8
JsonObject = dict[str, Any]
Parent = ConversationParent | WorkflowParent | JsonObject | None


def workflow_actor_name(run_id: str) -> str:
    return f"workflow:{run_id}"


def _env(settings_env: dict[str, str] | None) -> dict[str, str]:
    """The ``WONDER_*`` settings a coordinator gets: the given ones, else this process's."""
    source = settings_env if settings_env else os.environ
    return {k: v for k, v in source.items() if k.startswith("WONDER_")}


def create_coordinator(run_id: str, settings_env: dict[str, str]) -> Any:
    """Get or create the named detached coordinator of ``run_id``."""
    return (
        ray.remote(WorkflowCoordinator)
        .options(
            name=workflow_actor_name(run_id),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=0,  # a restarted coordinator would not have its tokens back
            max_concurrency=1000,
        )
        .remote(run_id, settings_env)
    )


class _Reserve(CoordinatorReserve):
    def __init__(self, size: int, settings_env: dict[str, str]) -> None:
        super().__init__(size, settings_env, lambda rid: create_coordinator(rid, settings_env))


_reserve: dict[str, Any] = {}  # this process's handle on the reserve, once it answered


def reserve_size() -> int:
    """``WONDER_WORKFLOW_RESERVE``: coordinators kept ready ahead of runs (default 2; 0: none)."""
    return max(0, int(os.environ.get("WONDER_WORKFLOW_RESERVE", "2")))


def coordinator_reserve(settings_env: dict[str, str]) -> Any:
    """Get or create the reserve actor."""
    return (
        ray.remote(_Reserve)
        .options(
            name=RESERVE_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            max_concurrency=1000,
        )
        .remote(reserve_size(), settings_env)
    )


def wake_reserve(settings_env: dict[str, str]) -> None:
    """Make sure this process has the reserve's handle (or is fetching it); never blocks."""
    if reserve_size() == 0 or "waking" in _reserve:
        return
    _reserve["waking"] = coordinator_reserve(settings_env)
    ref = _reserve["waking"].wake.remote()
    ref.future().add_done_callback(lambda _f: _reserve.setdefault("ready", _reserve["waking"]))


async def reserved_run_id(settings_env: dict[str, str]) -> str | None:
    """A run id whose coordinator is already up, when the reserve has one.

    The first call in a process only wakes the reserve (creating it can take seconds) and starts
    this run cold; later calls ask it, a ~1 ms actor call.
    """
    handle = _reserve.get("ready")
    if handle is None:
        wake_reserve(settings_env)
        return None
    try:
        run_id: str | None = await handle.take.remote(settings_env)
    except ray.exceptions.RayError:
        _reserve.clear()  # gone: wake it again next time
        return None
    return run_id


def _ops(settings_env: dict[str, str] | None) -> tuple[Any, WorkflowRunOps]:
    store = open_store(_env(settings_env) or None)
    return store, WorkflowRunOps(store.db)


def _parent(parent: Parent) -> ConversationParent | WorkflowParent | None:
    if parent is None or isinstance(parent, ConversationParent | WorkflowParent):
        return parent
    kind = parent.get("type") or ("workflow" if "run_id" in parent else "conversation")
    model = WorkflowParent if kind == "workflow" else ConversationParent
    return model.model_validate({**parent, "type": kind})


def _validate_input(schema: JsonObject | None, run_input: JsonObject) -> None:
    if schema is None:
        return
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(schema).iter_errors(run_input), key=lambda e: e.path)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "input"
        raise InvalidInput(f"{where}: {errors[0].message}")


async def start_workflow_run(
    workflow_id: str,
    input: JsonObject,
    version: int | None = None,
    parent: Parent = None,
    *,
    client_id: str | None = None,
    run_id: str | None = None,
    settings_env: dict[str, str] | None = None,
) -> str:
    """Start a run of ``workflow_id`` (latest version unless ``version``); returns its run id.

    Raises:
        NotFound: no such workflow (version).
        InvalidInput: ``input`` does not match the workflow's ``input_schema``.
        PermissionDenied: subworkflows nested deeper than ``MAX_SUBWORKFLOW_DEPTH``.
    """
    store, runs = _ops(settings_env)
    definition = store.workflows.get(workflow_id, version)
    if not isinstance(input, dict):
        raise InvalidInput("workflow input must be an object")
    _validate_input(definition.input_schema, input)
    owner = _parent(parent)
    depth, context = 0, RunContext()
    if isinstance(owner, WorkflowParent):
        parent_run = runs.get(owner.run_id)
        depth, context = parent_run.depth + 1, parent_run.context
        client_id = client_id or parent_run.client_id
    elif isinstance(owner, ConversationParent):
        context = RunContext(
            conversation_id=owner.conversation_id, agent_id=owner.agent_id, turn_id=owner.turn_id
        )
        if client_id is None:
            client_id = store.conversations.get(owner.conversation_id).client_id
    if depth > MAX_SUBWORKFLOW_DEPTH:
        raise PermissionDenied(f"subworkflows nest at most {MAX_SUBWORKFLOW_DEPTH} deep")
    env = _env(settings_env)
    if run_id is None:
        run_id = await reserved_run_id(env) or new_id("run")
    run = WorkflowRun(
        id=run_id,
        workflow_id=definition.id,
        workflow_version=definition.version,
        input=input,
        parent=owner,
        client_id=client_id,
        context=context,
        depth=depth,
        created_at=utc_now(),
    )
    runs.insert(run)
    try:
        handle = create_coordinator(run.id, env)
        await handle.start.remote()
    except Exception as exc:
        _fail_unstarted(runs, run.id, f"the coordinator did not start: {exc}")
        raise
    return run.id


def _fail_unstarted(runs: WorkflowRunOps, run_id: str, message: str) -> WorkflowRun:
    run = runs.get(run_id)
    if run.status.terminal:
        return run
    failed = run.model_copy(
        update={
            "status": RunStatus.FAILED,
            "finished_at": utc_now(),
            "error": RunError(code="INTERNAL_ERROR", message=message, retriable=True),
        }
    )
    return runs.save(failed)


def _coordinator(run_id: str) -> Any | None:
    try:
        return ray.get_actor(workflow_actor_name(run_id), namespace=NAMESPACE)
    except ValueError:
        return None


def get_run(
    run_id: str, client_id: str | None = None, settings_env: dict[str, str] | None = None
) -> WorkflowRun:
    """The stored run; a run left unfinished by a coordinator that is gone is failed first."""
    _store, runs = _ops(settings_env)
    run = runs.get(run_id, client_id)
    if not run.status.terminal and run.started_at is not None and _coordinator(run_id) is None:
        run = runs.get(run_id, client_id)  # it may have finished between the two reads
        if not run.status.terminal:
            run = _fail_unstarted(runs, run_id, "interrupted: the coordinator is gone")
    return run


def get_history(run_id: str, settings_env: dict[str, str] | None = None) -> list[NodeRecord]:
    """The run's node history: one record per token, in creation order."""
    return _ops(settings_env)[1].history(run_id)


async def wait_for_run(
    run_id: str, timeout_s: float | None = None, *, settings_env: dict[str, str] | None = None
) -> WorkflowRun:
    """The run once it has ended (or as it stands after ``timeout_s``)."""
    handle = _coordinator(run_id)
    if handle is not None:
        try:
            await handle.wait.remote(timeout_s)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass  # it exited between lookup and call: the store has the outcome
    run = get_run(run_id, settings_env=settings_env)
    deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
    while not run.status.terminal and run.started_at is None:
        if deadline is not None and asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)  # created, not yet started by its coordinator
        run = get_run(run_id, settings_env=settings_env)
    return run


async def cancel_run(
    run_id: str, reason: str = "cancelled", *, settings_env: dict[str, str] | None = None
) -> WorkflowRun:
    """Cancel a run and its live work (subworkflows too); a finished run is left as it is."""
    handle = _coordinator(run_id)
    if handle is not None:
        try:
            await handle.cancel.remote(reason)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass
    return get_run(run_id, settings_env=settings_env)


async def run_workflow_to_end(
    workflow_id: str,
    input: JsonObject,
    parent: Parent = None,
    version: int | None = None,
    timeout_s: float | None = None,
) -> JsonObject:
    """Run a workflow and return a tool-result-shaped ``{"success", "result" | "error"}``.

    Used by a conversation's workflow tools: business errors (not found, invalid input, a failed
    run) come back as results; infrastructure errors raise so the tool's retry policy applies.
    """
    try:
        run_id = await start_workflow_run(workflow_id, input, version, parent)
    except WonderError as exc:
        if exc.retriable:
            raise
        return {"success": False, "error": exc.to_dict()}
    try:
        run = await wait_for_run(run_id, timeout_s)
    except asyncio.CancelledError:  # the caller gave up (a tool timeout): so does the run
        await asyncio.shield(cancel_run(run_id, "the caller stopped waiting"))
        raise
    if run.status is RunStatus.COMPLETED:
        return {"success": True, "result": run.output, "run_id": run_id}
    if not run.status.terminal:
        await cancel_run(run_id, "timed out")
        error: JsonObject = {
            "code": "TIMEOUT",
            "message": f"workflow run {run_id} timed out",
            "retriable": True,
        }
        return {"success": False, "error": error, "run_id": run_id}
    cause = run.error.message if run.error else run.status.value
    error = {
        "code": "EXECUTION_FAILED",
        "message": f"workflow {workflow_id} failed: {cause}",
        "retriable": False,
    }
    return {"success": False, "error": error, "run_id": run_id}
