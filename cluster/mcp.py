"""MCP connections on Ray: the ``mcp-connections`` actor and the ``McpTools`` adapter over it."""

from __future__ import annotations

import functools
from typing import Any

import ray

from actors.mcp.actor import McpConnectionsActor, McpSetup
from cluster import placement
from cluster.by_name import FunctionRef
from cluster.naming import as_wonder_error, named_detached
from core.jsontypes import JsonObject
from core.mcp import ListedTool, McpServer, ToolsChanged
from core.ports import TaskOutcome

MCP_CONNECTIONS_NAME = "mcp-connections"
# Built in the actor's own process (``cluster/mcp_setup.py``): named, not imported, so a process
# that only creates or calls the actor (a conversation, a task, the gateway) never imports the MCP
# client library (about 2 s of imports, each process).
MCP_SETUP = FunctionRef("cluster.mcp_setup", "mcp_setup")
_handles: dict[tuple[tuple[str, str], ...], Any] = {}


def _setup(ref: FunctionRef, settings_env: dict[str, str], changed: ToolsChanged) -> McpSetup:
    built: McpSetup = ref.resolve()(settings_env, changed)
    return built


def connections_handle(settings_env: dict[str, str]) -> Any:
    """The ``mcp-connections`` actor (get-or-create; cached per process)."""
    key = tuple(sorted(settings_env.items()))
    if key not in _handles:
        setup = functools.partial(_setup, MCP_SETUP, dict(settings_env))
        _handles[key] = named_detached(
            McpConnectionsActor, MCP_CONNECTIONS_NAME, setup, **placement.singleton_options()
        )
    return _handles[key]


class RayMcpTools:
    """``McpTools`` over the ``mcp-connections`` actor."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self._settings_env = dict(settings_env)

    def _actor(self) -> Any:
        return connections_handle(self._settings_env)

    async def list_tools(self, server: McpServer) -> list[ListedTool]:
        try:
            listed: list[ListedTool] = await self._actor().list_tools.remote(server)
        except ray.exceptions.RayError as exc:
            raise as_wonder_error(exc, f"MCP server {server.id}") from None
        return listed

    async def call_tool(
        self, server: McpServer, name: str, arguments: JsonObject, timeout_s: float
    ) -> TaskOutcome:
        try:
            outcome: TaskOutcome = await self._actor().call_tool.remote(
                server, name, arguments, timeout_s
            )
        except ray.exceptions.RayError as exc:
            raise as_wonder_error(exc, f"MCP server {server.id}") from None
        return outcome

    async def forget(self, client_id: str, server_id: str) -> None:
        try:
            await self._actor().forget.remote(client_id, server_id)
        except ray.exceptions.RayError as exc:
            raise as_wonder_error(exc, "the MCP connections") from None
