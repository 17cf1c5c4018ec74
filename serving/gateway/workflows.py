"""Workflow runs: start one, read its status and node history, cancel it, re-run it from a node.

The workflow definitions themselves are library objects (``PUT/GET /v1/workflows/{id}``, see
``library.py``). A run belongs to the client that started it; another client gets a 404. A run
that a conversation's agent started works for that conversation: an acting user reaches it only
as a member there (``serving.gateway.member_access``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from pydantic import BaseModel, ConfigDict, Field

from core.domain import NAME_PATTERN
from core.jsontypes import JsonObject
from core.workflows import NODE_ID_PATTERN, NodeRecord, WorkflowRun
from serving.gateway.auth import ClientId, Context, User
from serving.gateway.context import GatewayContext
from serving.gateway.protocol import Items

router = APIRouter(tags=["workflow runs"])

WorkflowId = Annotated[str, Path(pattern=NAME_PATTERN, description="Library workflow id")]
RunId = Annotated[str, Path(max_length=64, description="Workflow run id")]
MAX_WAIT_S = 300.0
USER_SCAN = 2000  # with a user, the newest runs looked through for those it may see


class RunStart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: JsonObject = Field(default_factory=dict, description="Checked against input_schema")
    version: int | None = Field(None, ge=1, description="Default: the latest version")
    project_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Work on this project: the run gets the branch wonder/run-<run_id> from its "
        "default branch, where its tasks and agent nodes work (GET /v1/workflow-runs/{id}/diff)",
    )
    wait_s: float = Field(
        0.0,
        ge=0.0,
        le=MAX_WAIT_S,
        description="Wait up to this long for the run to end before answering (0: answer now)",
    )


class RerunStart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    from_node: str = Field(
        pattern=NODE_ID_PATTERN,
        description="Run this node and every node it reaches again; the others take the run's "
        "recorded outputs",
    )
    input: JsonObject | None = Field(
        None, description="The input from_node gets (default: the one its upstream outputs give)"
    )
    wait_s: float = Field(
        0.0,
        ge=0.0,
        le=MAX_WAIT_S,
        description="Wait up to this long for the new run to end before answering (0: answer now)",
    )


class RunView(BaseModel):
    run: WorkflowRun
    nodes: list[NodeRecord] = Field(description="Node history: one record per token, in order")


class RunCancel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("cancelled by the client", max_length=500)


def _view(context: GatewayContext, run: WorkflowRun) -> RunView:
    return RunView(run=run, nodes=context.workflows.history(run.id))


@router.post(
    "/v1/workflows/{workflow_id}/runs",
    response_model=RunView,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Start a run (202 with the run; with wait_s, the run as it stands after waiting)",
)
async def start_run(
    workflow_id: WorkflowId, body: RunStart, context: Context, client_id: ClientId
) -> RunView:
    runs = context.workflows
    run_id = await runs.start(
        workflow_id, body.input, body.version, client_id=client_id, project_id=body.project_id
    )
    if body.wait_s > 0:
        run = await runs.wait(run_id, body.wait_s)
    else:
        run = runs.get(run_id, client_id)
    return _view(context, run)


@router.get(
    "/v1/workflow-runs/{run_id}",
    response_model=RunView,
    summary="A run's status, output or error, events, and node history",
)
def read_run(run_id: RunId, context: Context, client_id: ClientId) -> RunView:
    return _view(context, context.workflows.get(run_id, client_id))


RunList = Items[WorkflowRun]


@router.get("/v1/workflow-runs", response_model=RunList, summary="This client's runs, newest first")
def list_runs(
    context: Context,
    client_id: ClientId,
    user: User,
    workflow_id: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunList:
    runs = context.store.workflow_runs.list_runs(
        workflow_id=workflow_id, client_id=client_id, limit=limit if user is None else USER_SCAN
    )
    if user is not None:  # a run a conversation started shows only to that conversation's members
        started = {r.context.conversation_id for r in runs if r.context.conversation_id}
        member = context.store.members.present((c, user) for c in started)
        runs = [
            r
            for r in runs
            if r.context.conversation_id is None or (r.context.conversation_id, user) in member
        ][:limit]
    return RunList(items=runs)


@router.post(
    "/v1/workflow-runs/{run_id}/cancel",
    response_model=RunView,
    summary="Cancel a run and its live work (a finished run is returned as it is)",
)
async def cancel(run_id: RunId, body: RunCancel, context: Context, client_id: ClientId) -> RunView:
    context.workflows.get(run_id, client_id)  # ownership: 404 for another client's run
    return _view(context, await context.workflows.cancel(run_id, body.reason))


@router.post(
    "/v1/workflow-runs/{run_id}/reruns",
    response_model=RunView,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Re-run an ended run from one of its nodes: a new run reusing the upstream outputs",
)
async def rerun(run_id: RunId, body: RerunStart, context: Context, client_id: ClientId) -> RunView:
    runs = context.workflows
    new_run_id = await runs.rerun(run_id, body.from_node, body.input, client_id=client_id)
    if body.wait_s > 0:
        run = await runs.wait(new_run_id, body.wait_s)
    else:
        run = runs.get(new_run_id, client_id)
    return _view(context, run)
