"""The ``mcp-connections`` actor: every process's connections to MCP servers, in one place.

A conversation's tool call, the async-operations runner and the gateway (listing a server's tools
when it is registered) all reach a server through this actor, so a stdio server's one sandboxed
process and an HTTP server's session are shared, and a ``tools/list_changed`` notification is
heard once. Its state is only open connections: a restarted actor opens them again on use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.jsontypes import JsonObject
from core.mcp import ListedTool, McpServer, ToolsChanged
from core.mcp_sources import import_tools
from core.ports import TaskOutcome
from core.store import Store

if TYPE_CHECKING:
    from actors.mcp.connections import McpConnections


@dataclass(frozen=True, slots=True)
class McpSetup:
    """What the actor works with, built in its own process (``cluster.mcp_setup``): the MCP
    client library is imported there only, not by the processes that create or call the actor."""

    store: Store
    connections: McpConnections


class McpConnectionsActor:
    """Plain Python; ``cluster.mcp`` makes it a named detached Ray actor."""

    def __init__(self, setup: Callable[[ToolsChanged], McpSetup]) -> None:
        built = setup(self._tools_changed)
        self.store = built.store
        self.connections = built.connections
        self._idle_sweeper: asyncio.Task[None] | None = None

    async def _tools_changed(self, server: McpServer) -> None:
        current = await asyncio.to_thread(self.store.mcp_servers.find, server.client_id, server.id)
        if current is not None and current.key == server.key:
            await import_tools(self.store, self.connections, current)

    def _sweep_idle(self) -> None:
        if self._idle_sweeper is None or self._idle_sweeper.done():
            self._idle_sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        period = max(self.connections.settings.mcp_idle_s / 4, 1.0)
        while self.connections._open:  # the sweeper stops when nothing is open
            await asyncio.sleep(period)
            with contextlib.suppress(Exception):
                await self.connections.close_idle()

    async def list_tools(self, server: McpServer) -> list[ListedTool]:
        self._sweep_idle()
        return await self.connections.list_tools(server)

    async def call_tool(
        self, server: McpServer, name: str, arguments: JsonObject, timeout_s: float
    ) -> TaskOutcome:
        self._sweep_idle()
        return await self.connections.call_tool(server, name, arguments, timeout_s)

    async def forget(self, client_id: str, server_id: str) -> None:
        await self.connections.forget(client_id, server_id)
