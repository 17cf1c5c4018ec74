"""What the ``mcp-connections`` actor works with, built in its own process.

The only module of the cluster that imports the MCP client (through ``actors.mcp.connections``):
``cluster.mcp`` names it (``MCP_SETUP``) instead of importing it.
"""

from __future__ import annotations

from actors.mcp.actor import McpSetup
from actors.mcp.connections import McpConnections
from core.mcp import ToolsChanged
from core.secret_vault import SecretVault
from core.settings import settings_from_env
from core.store import store_for_settings


def mcp_setup(settings_env: dict[str, str], changed: ToolsChanged) -> McpSetup:
    """The store and the connections; an HTTP server's ``secret_headers`` resolve to the
    registering client's own secrets, by name."""
    settings = settings_from_env(settings_env)
    store = store_for_settings(settings)
    connections = McpConnections(settings, SecretVault(store, settings), changed)
    return McpSetup(store=store, connections=connections)
