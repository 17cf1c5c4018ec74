"""Connections to registered MCP servers, kept open while they are used (``core.mcp.McpTools``).

One connection per registration (``McpServer.key``: a changed registration gets a new one): an
asyncio task enters the MCP SDK's ``Client`` and holds it until the connection is closed, so its
transport (a sandboxed stdio process, or a streamable HTTP session) lives across tool calls.
A connection unused for ``WONDER_MCP_IDLE_S`` is closed; the next call opens a new one.

- **stdio**: the command runs in ``shell.exec``'s sandbox (``actors.mcp.sandboxed``): no
  network, a cleared environment, a scratch directory of its own.
- **HTTP**: the URL is checked against the operator's ``WONDER_MCP_ALLOWED_HOSTS`` before each
  connection (``core.egress``, the rules ``http.request`` and model providers follow: no
  loopback or private address unless an address entry lists it), and every request of the
  connection goes to the checked address itself (https: the certificate still names the host);
  no redirect is followed, and a request hook refuses any request to another destination. The
  client's ``secret_headers`` are resolved from its own secrets (``SecretResolver``: the
  vault) when connecting, and sent only on that connection.
- **Tool list changes**: the connection lists the tools again and stores them in the client's
  library (``core.mcp_sources.import_tools``) when the server says they changed: a
  ``notifications/tools/list_changed`` on an initialize-era connection, a ``ToolsListChanged``
  event of a ``subscriptions/listen`` stream (opened for it) on a current-protocol one.
  Announcements that come while a listing is under way are folded into one more listing.

Errors: a server that cannot be reached is a ``RetryableError`` (the tool's retry policy
applies); a call past its time limit a ``Timeout``; a protocol error (unknown tool, invalid
arguments) and a tool's own ``isError`` come back as failed outcomes the model sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from actors.mcp.sandboxed import sandboxed_argv
from core.egress import DEFAULT_PORTS, Pinned, checked, mcp_egress
from core.errors import (
    ErrorCode,
    InvalidInput,
    PermissionDenied,
    RetryableError,
    Timeout,
    WonderError,
)
from core.ids import new_id
from core.jsontypes import JsonObject
from core.mcp import (
    ListedTool,
    McpServer,
    SecretResolver,
    ToolsChanged,
    check_stdio_command,
    clean_text,
    listed_tool,
    outcome_of,
)
from core.ports import TaskOutcome, failed_outcome
from core.settings import Settings

log = logging.getLogger("wonder.mcp")

CONNECT_TIMEOUT_S = 60.0
MAX_ERROR_CHARS = 2000  # of a server's error message, as the model sees it
LIST_PAGES = 20
TOOLS_CHANGED = "notifications/tools/list_changed"
LISTEN_ATTEMPTS = 5
LISTEN_RETRY_S = 5.0
# JSON-RPC errors a server answers for a bad call: the model's to fix (not retried).
INVALID_CALL = {-32602: ErrorCode.INVALID_INPUT, -32601: ErrorCode.NOT_FOUND}


@dataclass
class _Connection:
    server: McpServer
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    client: Client | None = None
    error: BaseException | None = None
    task: asyncio.Task[None] | None = None
    last_used: float = field(default_factory=time.monotonic)
    modern: bool = False  # the protocol's current era: changes come on a listen stream


class McpConnections:
    """``McpTools`` for one process: the open connections, by registration."""

    def __init__(
        self,
        settings: Settings,
        secrets: SecretResolver,
        on_tools_changed: ToolsChanged | None = None,
    ) -> None:
        self.settings = settings
        self.secrets = secrets
        self.on_tools_changed = on_tools_changed
        self._open: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()
        self._refreshes: dict[str, asyncio.Task[None]] = {}
        self._refresh_again: set[str] = set()

    # ------------------------------------------------------------------ McpTools

    async def list_tools(self, server: McpServer) -> list[ListedTool]:
        client = await self._client(server)
        listed: list[ListedTool] = []
        cursor: str | None = None
        try:
            for _ in range(LIST_PAGES):
                page = await asyncio.wait_for(
                    client.list_tools(cursor=cursor, cache_mode="refresh"), server.timeout_s
                )
                for tool in page.tools:
                    item = listed_tool(tool.model_dump(mode="json", by_alias=True))
                    if item is None:
                        log.warning("MCP server %s listed an unusable tool: skipped", server.id)
                    else:
                        listed.append(item)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except TimeoutError:
            await self._drop(server)
            raise Timeout(f"MCP server {server.id} did not list its tools in time") from None
        except MCPError as exc:
            message = clean_text(exc.error.message, MAX_ERROR_CHARS)
            raise RetryableError(f"MCP server {server.id}: {message}") from None
        except ValidationError:  # JSON-RPC, but no tools/list result
            raise InvalidInput(
                f"MCP server {server.id} answered tools/list with something that is no MCP "
                "tool listing"
            ) from None
        return listed

    async def call_tool(
        self, server: McpServer, name: str, arguments: JsonObject, timeout_s: float
    ) -> TaskOutcome:
        client = await self._client(server)
        try:
            result = await asyncio.wait_for(client.call_tool(name, arguments), timeout_s)
        except TimeoutError:
            raise Timeout(f"MCP tool {name} did not answer within {timeout_s:g} s") from None
        except MCPError as exc:
            code = INVALID_CALL.get(exc.code, ErrorCode.EXECUTION_FAILED)
            message = clean_text(exc.error.message, MAX_ERROR_CHARS)
            return failed_outcome(code, f"MCP server {server.id}: {message}")
        except ValidationError:  # an answer that is JSON-RPC but no tools/call result
            return failed_outcome(
                ErrorCode.EXECUTION_FAILED,
                f"MCP server {server.id} answered {name} with something that is no MCP result",
            )
        except (OSError, httpx2.HTTPError, ConnectionError) as exc:
            await self._drop(server)
            raise RetryableError(f"MCP server {server.id} was lost: {exc}") from None
        return outcome_of(result.model_dump(mode="json", by_alias=True))

    async def forget(self, client_id: str, server_id: str) -> None:
        prefix = f"{client_id}/{server_id}/"
        for key in [k for k in self._open if k.startswith(prefix)]:
            await self._close(key)

    async def close_all(self) -> None:
        for key in list(self._open):
            await self._close(key)

    async def close_idle(self) -> None:
        """Close the connections unused for ``mcp_idle_s``."""
        limit = time.monotonic() - self.settings.mcp_idle_s
        for key, connection in list(self._open.items()):
            if connection.last_used < limit:
                await self._close(key)

    # ------------------------------------------------------------------ connections

    async def _client(self, server: McpServer) -> Client:
        async with self._lock:
            connection = self._open.get(server.key)
            if connection is not None and connection.task is not None and connection.task.done():
                del self._open[server.key]
                connection = None
            if connection is None:
                await self.forget(server.client_id, server.id)  # an older registration's
                connection = _Connection(server)
                connection.task = asyncio.create_task(self._hold(connection))
                self._open[server.key] = connection
        connection.last_used = time.monotonic()
        try:
            await asyncio.wait_for(connection.ready.wait(), CONNECT_TIMEOUT_S)
        except TimeoutError:
            await self._close(server.key)
            raise RetryableError(f"MCP server {server.id} did not start in time") from None
        if connection.client is None:
            await self._close(server.key)
            raise _unreachable(server, connection.error)
        return connection.client

    async def _hold(self, connection: _Connection) -> None:
        """Open the connection and keep it until it is closed (the SDK's contexts must be
        entered and left by one task)."""
        server = connection.server
        scratch: Path | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if server.transport == "stdio":
                    # Checked again: the operator may have narrowed the list since.
                    check_stdio_command(server.command or [], self.settings.mcp_stdio_commands)
                    scratch = self._scratch(server)
                    argv = sandboxed_argv(
                        server.command or [], scratch, self.settings, server.client_id
                    )
                    transport: Any = StdioServerParameters(
                        command=argv[0], args=argv[1:], env={}, cwd=str(scratch)
                    )
                else:
                    transport = await self._http_transport(server, stack)
                client = Client(
                    transport,
                    message_handler=self._notifications(connection),
                    read_timeout_seconds=max(server.timeout_s, 30.0),
                )
                connection.client = await stack.enter_async_context(client)
                connection.modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                if connection.modern and self.on_tools_changed is not None:
                    listener = asyncio.create_task(self._listen(connection, client))
                    stack.push_async_callback(_stop, listener)
                connection.ready.set()
                log.info("MCP server %s of %s connected", server.id, server.client_id)
                await connection.closing.wait()
        except WonderError as exc:
            connection.error = exc
        except Exception as exc:  # whatever the transport raised: the caller sees it
            log.warning("MCP server %s: connection failed: %r", server.id, exc)
            connection.error = exc
            if server.transport == "stdio" and not connection.ready.is_set():
                # The command ran and did not answer as an MCP server: starting it again does
                # the same (an HTTP server that cannot be reached may be back: retriable).
                connection.error = InvalidInput(
                    f"MCP server {server.id}: its command did not start an MCP server "
                    f"({type(exc).__name__}: {exc})"
                )
        finally:
            connection.client = None
            connection.ready.set()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    async def _http_transport(self, server: McpServer, stack: contextlib.AsyncExitStack) -> Any:
        pinned = await checked(server.url or "", mcp_egress(self.settings), "url")
        headers = dict(server.headers)
        for name, ref in server.secret_headers.items():
            where = f"MCP server {server.id} header {name}"
            value = await asyncio.to_thread(
                self.secrets.resolve, server.client_id, ref.secret, where
            )
            headers[name] = ref.prefix + value
        headers.update(pinned.headers())
        http = httpx2.AsyncClient(
            headers=headers,
            trust_env=False,
            follow_redirects=False,
            max_redirects=0,  # the SDK follows same-origin redirects up to this: none
            event_hooks={"request": [pinned_only(pinned)]},
            timeout=httpx2.Timeout(30.0, read=max(server.timeout_s, 30.0) + 30.0),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(pinned.url(), http_client=http)

    def _scratch(self, server: McpServer) -> Path:
        root = self.settings.data_dir.resolve() / "mcp-sandboxes"
        path = root / new_id("mcp").lower()
        path.mkdir(parents=True, exist_ok=False)
        return path

    def _notifications(self, connection: _Connection) -> MessageHandlerFnT:
        async def handle(message: IncomingMessage) -> None:
            method = getattr(getattr(message, "root", message), "method", None)
            if method == TOOLS_CHANGED and not connection.modern:
                self._tools_changed(connection.server)

        return handle

    async def _listen(self, connection: _Connection, client: Client) -> None:
        """A current-protocol connection's ``subscriptions/listen`` stream for tool-list changes,
        opened again (and the tools listed again: changes may have been missed) when it drops."""
        server = connection.server
        for attempt in range(LISTEN_ATTEMPTS):
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    if attempt:
                        self._tools_changed(server)
                    async for event in subscription:
                        if isinstance(event, ToolsListChanged):
                            self._tools_changed(server)
                return  # the server closed the stream gracefully: it announces no more
            except (SubscriptionLost, MCPError, OSError, httpx2.HTTPError) as exc:
                log.info("MCP server %s: tool-list changes not followed: %r", server.id, exc)
            if connection.closing.is_set():
                return
            await asyncio.sleep(LISTEN_RETRY_S)

    def _tools_changed(self, server: McpServer) -> None:
        """List the tools again (once more after a listing under way, if one is)."""
        if self.on_tools_changed is None:
            return
        running = self._refreshes.get(server.key)
        if running is not None and not running.done():
            self._refresh_again.add(server.key)
            return
        task = asyncio.create_task(self._refresh(server))
        self._refreshes[server.key] = task

    async def _refresh(self, server: McpServer) -> None:
        assert self.on_tools_changed is not None
        again = True
        while again:
            self._refresh_again.discard(server.key)
            try:
                await self.on_tools_changed(server)
            except WonderError as exc:
                log.warning("MCP server %s: tools not listed again: %s", server.id, exc.message)
            again = server.key in self._refresh_again
        self._refreshes.pop(server.key, None)

    async def _drop(self, server: McpServer) -> None:
        await self._close(server.key)

    async def _close(self, key: str) -> None:
        connection = self._open.pop(key, None)
        if connection is None or connection.task is None:
            return
        connection.closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(connection.task), 10.0)
        except TimeoutError:
            connection.task.cancel()


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def pinned_only(pinned: Pinned) -> Callable[[httpx2.Request], Awaitable[None]]:
    """A request hook: every request of a connection goes to the checked address and port (a
    ``PermissionDenied`` before anything is sent otherwise), with the host's name for TLS."""
    address = str(pinned.address)
    port = pinned.target.port
    extensions = pinned.extensions()

    async def hook(request: httpx2.Request) -> None:
        url = request.url
        if url.host != address or (url.port or DEFAULT_PORTS.get(url.scheme)) != port:
            raise PermissionDenied(
                f"MCP connection to {pinned.target.host}: a request to {url.host}:{url.port} "
                "is not the checked destination"
            )
        request.extensions = {**request.extensions, **extensions}

    return hook


def _unreachable(server: McpServer, error: BaseException | None) -> WonderError:
    if isinstance(error, WonderError):
        return error
    return RetryableError(f"MCP server {server.id} could not be reached: {error!r}")
