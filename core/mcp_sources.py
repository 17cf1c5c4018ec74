"""Registering an MCP server and taking its tools into the client's library (``core.mcp``)."""

from __future__ import annotations

import asyncio

from core.ids import utc_now
from core.mcp import McpServer, McpTools, library_tools
from core.store import Store


async def import_tools(
    store: Store, tools: McpTools, server: McpServer, register: bool = False
) -> McpServer:
    """List the server's tools, store each as a tool of the client's library (a new version when
    it changed) and record which ones the registration gave; returns the registration saved.

    ``register``: ``server`` is a new or changed registration, saved with its tools once the
    listing succeeded (a server that cannot be reached or listed is not registered). Otherwise
    (a refresh, a change notification) the stored registration is updated only if it is still
    ``server``: one deleted or changed meanwhile keeps its own listing."""
    listed = await tools.list_tools(server)
    at = utc_now()
    made = library_tools(server, listed)

    def save() -> McpServer:
        if not register:
            current = store.mcp_servers.find(server.client_id, server.id)
            if current is None or current.updated_at != server.updated_at:
                return server
        for tool in made:
            store.tools.put(tool, at, owner=server.client_id)
        updated = server.model_copy(update={"tool_ids": [t.id for t in made], "listed_at": at})
        return store.mcp_servers.save(updated)

    return await asyncio.to_thread(save)
