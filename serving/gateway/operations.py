"""The operations view's figures: ``GET /v1/operations`` (operator keys only: the figures are
the whole cluster's), read-only.

Resident conversation actors against the cap, activations, evictions and waiting activations
(the conversation directory), the Serve deployments with their replicas by state, the model calls
of every client over the last minutes (calls, failures, tokens, tokens a second), and the Ray
dashboard's port, for links to an actor's page. A part the gateway cannot read right now is
null with a note, never a failure of the whole view.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import Model
from core.errors import WonderError
from core.ids import utc_now
from core.jsontypes import JsonObject
from core.model_calls import UsageTotals
from serving.gateway.auth import AdminId, Context

router = APIRouter(tags=["quotas and audit"])
log = logging.getLogger("wonder.gateway.operations")


class ModelThroughput(Model):
    window_s: int
    totals: UsageTotals
    calls_per_minute: float
    completion_tokens_per_s: float


class Operations(Model):
    residency: JsonObject | None = Field(
        None,
        description="The conversation directory: resident, max_resident, activations, "
        "evictions, starting, waiting, idle, refused, nodes, and its resident actors",
    )
    deployments: list[JsonObject] | None = Field(
        None, description="Serve deployments: application, name, status, replicas by state"
    )
    model_calls: ModelThroughput
    dashboard_port: int = Field(description="The Ray dashboard's port on the head node")
    notes: list[str] = Field(default_factory=list, description="What could not be read, and why")


async def _read(what: str, notes: list[str], call: Any) -> Any:
    try:
        return await call()
    except (WonderError, OSError, RuntimeError, ValueError) as exc:  # the view goes on without it
        log.warning("operations: %s unavailable: %s", what, exc)
        notes.append(f"{what}: unavailable ({type(exc).__name__})")
        return None


@router.get(
    "/v1/operations",
    response_model=Operations,
    summary="The cluster at a glance (admin keys): resident conversation actors against the cap, "
    "activations and evictions, Serve deployments, model call throughput",
)
async def operations(
    context: Context,
    _admin: AdminId,
    window_s: Annotated[
        int, Query(ge=10, le=86_400, description="The throughput's window, seconds")
    ] = 300,
) -> Operations:
    notes: list[str] = []
    view = context.cluster
    residency = deployments = None
    if view is None:
        notes.append("cluster figures: this gateway runs without a cluster view")
    else:
        residency = await _read("conversation directory", notes, view.residency)
        deployments = await _read("Serve deployments", notes, view.model_deployments)
    since = utc_now() - timedelta(seconds=window_s)
    totals = await run_in_threadpool(context.store.records.totals_since, since)
    return Operations(
        residency=residency,
        deployments=deployments,
        model_calls=ModelThroughput(
            window_s=window_s,
            totals=totals,
            calls_per_minute=round(totals.calls * 60 / window_s, 3),
            completion_tokens_per_s=round(totals.completion_tokens / window_s, 3),
        ),
        dashboard_port=context.settings.dashboard_port,
        notes=notes,
    )
