"""MCP servers as tool sources: ``/v1/mcp-servers`` (docs/protocols.md).

``PUT /v1/mcp-servers/{server_id}`` registers (or changes) a server of the client's — streamable
HTTP (``url``, on the operator's ``WONDER_MCP_ALLOWED_HOSTS``) or stdio (``command``, run in the
sandbox) — connects to it, and stores each tool it lists as a tool of the client's library
(``mcp.<server>.<tool>``): a persona selects them by id. Writes need an admin-scope key (they
change the client's library) and are recorded in the audit trail. ``POST .../refresh`` lists the
tools again (the server's own ``tools/list_changed`` notifications do the same while a connection
is open).

Credentials: ``secret_headers`` name the client's own secrets (``PUT /v1/secrets/{name}``); a
name the client has no secret under is refused when registering, and the values are read only
by the process that connects, for that connection (never stored with the registration).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import Field

from core.client_secrets import SecretRef
from core.domain import NAME_PATTERN
from core.egress import check_url, mcp_egress
from core.errors import InvalidInput, NotFound, Unavailable
from core.ids import utc_now
from core.mcp import McpServer, McpTools, check_stdio_command
from core.mcp_sources import import_tools
from core.strict import StrictScalars
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, KeyAdmin
from serving.gateway.context import GatewayContext

router = APIRouter(prefix="/v1/mcp-servers", tags=["mcp"])

ServerId = Annotated[str, Path(pattern=NAME_PATTERN, description="The server's id")]


class McpServerPut(StrictScalars):
    """A registration: ``transport: http`` with ``url`` (and headers), or ``transport: stdio``
    with ``command`` (a program and its arguments, never a shell line)."""

    model_config = {"extra": "forbid"}

    transport: Literal["http", "stdio"]
    url: str | None = Field(None, max_length=2000)
    command: list[str] | None = Field(None, min_length=1, max_length=64)
    headers: dict[str, str] = Field(default_factory=dict, max_length=32)
    secret_headers: dict[str, SecretRef] = Field(default_factory=dict, max_length=8)
    tool_prefix: str = Field("", pattern=r"^[A-Za-z0-9_-]{0,20}$")
    timeout_s: float = Field(60.0, gt=0, le=3600)


class McpServerList(StrictScalars):
    items: list[McpServer]


def _tools(context: GatewayContext) -> McpTools:
    if context.mcp is None:
        raise Unavailable("MCP connections are not available on this gateway")
    return context.mcp


def _registration(
    context: GatewayContext, client_id: str, server_id: str, body: McpServerPut, at: datetime
) -> McpServer:
    """The registration as it will be stored (validated: its fields for its transport first,
    then a URL against the allow-list, now and again before each connection, a command against
    the operator's programs, and the secrets it names)."""
    previous = context.store.mcp_servers.find(client_id, server_id)
    server = McpServer.model_validate(
        {
            **body.model_dump(exclude_none=True),
            "id": server_id,
            "client_id": client_id,
            "created_at": previous.created_at if previous else at,
            "updated_at": at,
        }
    )
    if server.url is not None:
        check_url(server.url, mcp_egress(context.settings), "url")
    if server.command is not None:
        check_stdio_command(server.command, context.settings.mcp_stdio_commands)
    for header, ref in server.secret_headers.items():
        try:
            context.store.client_secrets.meta(client_id, ref.secret)
        except NotFound:
            raise InvalidInput(
                f"secret_headers.{header}: you have no secret {ref.secret} "
                f"(PUT /v1/secrets/{ref.secret} first)"
            ) from None
    return server


@router.put(
    "/{server_id}",
    response_model=McpServer,
    summary="Register an MCP server: its tools become tools of your library",
)
async def put_server(
    server_id: ServerId,
    body: McpServerPut,
    context: Context,
    client_id: ClientId,
    key: KeyAdmin,
    audit: Audit,
) -> McpServer:
    server = await asyncio.to_thread(_registration, context, client_id, server_id, body, utc_now())
    tools = _tools(context)
    await tools.forget(client_id, server.id)
    saved = await import_tools(context.store, tools, server, register=True)
    target = f"mcp_servers:{server_id}"
    await asyncio.to_thread(audit.record, "mcp_server.put", target, _audited(saved))
    return saved


def _audited(server: McpServer) -> dict[str, object]:
    """What the audit trail keeps of a registration: where it points and what it gave (secret
    names, never values)."""
    return {
        "id": server.id,
        "transport": server.transport,
        "url": server.url,
        "command": server.command,
        "secret_headers": {name: ref.secret for name, ref in server.secret_headers.items()},
        "tool_ids": server.tool_ids,
    }


@router.post(
    "/{server_id}/refresh",
    response_model=McpServer,
    summary="List the server's tools again into your library",
)
async def refresh_server(
    server_id: ServerId, context: Context, client_id: ClientId, key: KeyAdmin, audit: Audit
) -> McpServer:
    server = await asyncio.to_thread(context.store.mcp_servers.get, client_id, server_id)
    saved = await import_tools(context.store, _tools(context), server)
    target = f"mcp_servers:{server_id}"
    await asyncio.to_thread(audit.record, "mcp_server.refresh", target, _audited(saved))
    return saved


@router.get("", response_model=McpServerList, summary="List your MCP servers")
def list_servers(context: Context, client_id: ClientId) -> McpServerList:
    return McpServerList(items=context.store.mcp_servers.list(client_id))


@router.get("/{server_id}", response_model=McpServer, summary="Get an MCP server")
def get_server(server_id: ServerId, context: Context, client_id: ClientId) -> McpServer:
    return context.store.mcp_servers.get(client_id, server_id)


@router.delete(
    "/{server_id}",
    status_code=204,
    summary="Remove an MCP server (its tools stay in the library and answer NOT_FOUND)",
)
async def delete_server(
    server_id: ServerId, context: Context, client_id: ClientId, key: KeyAdmin, audit: Audit
) -> None:
    server = await asyncio.to_thread(context.store.mcp_servers.get, client_id, server_id)
    await asyncio.to_thread(context.store.mcp_servers.delete, client_id, server_id)
    await _tools(context).forget(client_id, server_id)
    target = f"mcp_servers:{server_id}"
    await asyncio.to_thread(audit.record, "mcp_server.delete", target, _audited(server))
