"""The gateway app: ``create_api`` builds the FastAPI app over a ``GatewayContext``.

``cluster.gateway`` wraps it in the Ray Serve deployment ``gateway``, building the context's ports
inside each replica; tests without Ray build it over fakes.
"""

from __future__ import annotations

import functools

from fastapi import APIRouter, Depends, FastAPI
from starlette.routing import BaseRoute

from core.turn_quotas import default_quota
from serving.gateway import (
    a2a,
    admin,
    agents,
    api_docs,
    api_examples,
    approvals,
    call_context,
    call_replay,
    callables,
    calls,
    console,
    context_channel,
    conversation_control,
    conversation_search,
    conversations,
    export,
    forks,
    hooks,
    keys,
    library,
    mcp,
    mcp_servers,
    member_access,
    members,
    memories,
    memory_upkeep,
    messages,
    openai_agents,
    operations,
    projects,
    secrets,
    sessions,
    stream,
    stream_tickets,
    threads,
    trace,
    triggers,
    turns,
    user_quotas,
    workflows,
    workspaces,
)
from serving.gateway.context import GatewayContext
from serving.gateway.errors import install_error_handlers
from serving.gateway.limits import RequestLimits
from serving.gateway.protocol import ErrorResponse
from serving.gateway.query_params import refuse_unknown_query
from serving.gateway.quota_checks import QuotaGuard

DESCRIPTION = """\
LLM agents as an actor cluster. Authenticate with `Authorization: Bearer <api key>`
(`wonder keys create NAME`). Errors are `{"error": {"code", "message", "retriable"}}`.
Follow a conversation on the WebSocket `/v1/conversations/{id}/stream?after_seq=N`
(see docs/api.md). Limits, quotas (429 with `Retry-After`) and the audit trail: docs/security.md.
"""

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Malformed request"),
        (401, "Missing or invalid API key"),
        (404, "Not found"),
        (403, "Not allowed for this key"),
        (409, "Conflict"),
        (413, "Body over this route's size limit"),
        (422, "Invalid fields"),
        (429, "Over a quota; retry after the Retry-After seconds"),
        (503, "Temporarily unavailable; retry"),
    )
}


ROUTERS: tuple[APIRouter, ...] = (
    library.router,
    callables.router,
    agents.router,
    export.router,
    conversations.router,
    conversation_search.router,
    context_channel.router,
    forks.router,
    messages.router,
    turns.router,
    calls.router,
    calls.usage_router,
    call_context.router,
    call_replay.router,
    trace.router,
    threads.router,
    sessions.router,
    triggers.router,
    conversation_control.router,
    approvals.router,
    workflows.router,
    memories.router,
    memory_upkeep.router,
    projects.router,
    workspaces.router,
    workspaces.run_router,
    admin.router,
    operations.router,
    user_quotas.router,
    keys.router,
    secrets.router,
    members.router,
    stream_tickets.router,
    hooks.router,
    openai_agents.router,
    mcp_servers.router,
    mcp.router,
    a2a.router,
)


@functools.cache
def route_table() -> tuple[BaseRoute, ...]:
    """Every API route, built once per process and shared by every app the process makes.

    FastAPI analyses each route's signature and dependencies when its router is included (about
    a second for all of them); a route holds nothing of one app (its context is ``api.state``),
    so the table is built once, as ``FastAPI(dependencies=...)`` would build it: under a router
    with the app's own dependency, unknown query parameters refused on every route.
    """
    table = APIRouter(dependencies=[Depends(refuse_unknown_query)])
    table.include_router(console.router)
    table.include_router(stream.router)
    for router in ROUTERS:
        # member_access.MemberAccess: with an acting user (X-Wonder-User), every route checks
        # the user's level in the conversation it reaches (serving/gateway/member_access.py).
        dependencies = [member_access.MemberAccess]
        table.include_router(router, responses=ERROR_RESPONSES, dependencies=dependencies)
    # Webhook deliveries authenticate by the hook's signature, not by an API key; each posts as
    # the user who made the hook, checked where it lands (serving/gateway/hooks.py).
    table.include_router(hooks.delivery_router, responses=ERROR_RESPONSES)
    return tuple(table.routes)


def create_api(context: GatewayContext) -> FastAPI:
    """The gateway's FastAPI app over ``context`` (no Ray needed: tests pass a fake context)."""
    api = FastAPI(
        title="Wonder",
        version="0.1.0",
        description=DESCRIPTION,
        dependencies=[Depends(refuse_unknown_query)],  # every route: unknown query → 422
        docs_url=None,  # served by ``api_docs`` from a package, never from a CDN
        redoc_url=None,  # ReDoc has no offline build here: /docs is the reference
    )
    api.state.gateway = context
    api.state.quotas = QuotaGuard(context.store, defaults=default_quota(context.settings))
    api.add_middleware(RequestLimits)
    install_error_handlers(api)
    api_docs.install(api)
    api.router.routes.extend(route_table())
    api_examples.document(api)  # each route's description and examples (docs/reference/api.md)
    return api
