"""A small MCP server of our own (the ``mcp`` SDK, streamable HTTP on 127.0.0.1), run by the
protocol tests as a process of its own: what the reference server cannot show.

- It records every request it gets at ``/mcp`` (method and headers): ``GET /seen`` answers them,
  so a test can prove which credentials reached it and which never did.
- Its tool list changes on demand: ``POST /change`` removes ``alpha``, adds ``beta`` and announces
  the change — ``notifications/tools/list_changed`` to every session on the initialize-era
  protocol (``--legacy``: it then refuses ``server/discover``, so clients fall back to the
  handshake), or a ``ToolsListChanged`` event on ``subscriptions/listen`` streams on the current
  protocol.

    python tests/integration/mcp_test_server.py --port 8123 [--legacy]
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

METHOD_NOT_FOUND = -32601


def alpha() -> str:
    """The first tool: answers "alpha"."""
    return "alpha"


def beta() -> str:
    """The tool that appears after a change: answers "beta"."""
    return "beta"


def echo_back(text: str) -> str:
    """Answers its text."""
    return text


class Recorder:
    """ASGI middleware: every request to the MCP endpoint, as seen (method, path, headers)."""

    def __init__(self, app: ASGIApp, seen: list[dict[str, Any]]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append({"method": scope["method"], "headers": headers})
        await self.app(scope, receive, send)


def build(legacy: bool) -> ASGIApp:
    bus = InMemorySubscriptionBus()
    sessions: list[ServerSession] = []
    seen: list[dict[str, Any]] = []

    async def remember(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if legacy and ctx.method == "server/discover":
            raise MCPError(METHOD_NOT_FOUND, "server/discover: not on this server")
        if ctx.session not in sessions:
            sessions.append(ctx.session)
        return await call_next(ctx)

    server = MCPServer("wonder-test-server", subscriptions=bus, middleware=[remember])
    server.add_tool(alpha)
    server.add_tool(echo_back)

    @server.custom_route("/seen", methods=["GET"])
    async def show_seen(request: Request) -> JSONResponse:
        return JSONResponse(seen)

    @server.custom_route("/change", methods=["POST"])
    async def change(request: Request) -> JSONResponse:
        server.remove_tool("alpha")
        server.add_tool(beta)
        await bus.publish(ToolsListChanged())
        told = 0
        for session in list(sessions):
            try:
                await session.send_tool_list_changed()
                told += 1
            except Exception:  # a session gone: nothing to tell
                sessions.remove(session)
        return JSONResponse({"changed": True, "sessions": told})

    return Recorder(server.streamable_http_app(), seen)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--legacy", action="store_true")
    args = parser.parse_args()
    uvicorn.run(build(args.legacy), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
