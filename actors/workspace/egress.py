"""The egress proxy of a sandboxed command: its only way out of its network namespace.

One proxy per command that may reach hosts, listening on a unix socket in a private directory of
the host; the sandbox gets that directory bound in, and ``socat`` inside it turns the socket into
``127.0.0.1:3128`` of the sandbox's own loopback, where ``HTTP(S)_PROXY`` point (unix sockets
cross network namespaces; TCP does not). The proxy takes ``CONNECT host:port`` (HTTPS, and any TLS
or TCP protocol a client tunnels) and absolute ``http://`` requests, and applies
``core.shell_egress``: the host must be allowed by the persona and the operator, the proxy
resolves it itself and connects only to an address the rules allow, the one it checked. Every
decision is logged (``wonder.egress``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from core.shell_egress import (
    MAX_HEAD_BYTES,
    BadRequest,
    EgressPolicy,
    address_refusal,
    host_refusal,
    ip_literal,
    parse_request,
)

log = logging.getLogger("wonder.egress")

SOCKET_NAME = "proxy.sock"
HEAD_TIMEOUT_S = 30.0
RESOLVE_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 15.0
PIPE_CHUNK = 65_536

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to here (the host's resolver, not the sandbox's)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _answer(status: str, reason: str) -> bytes:
    body = f"wonder egress: {reason}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + body


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(PIPE_CHUNK):
            sink.write(chunk)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()


class EgressProxy:
    """An HTTP proxy that lets one command reach only what ``policy`` allows."""

    def __init__(self, policy: EgressPolicy, resolver: Resolver = system_resolver) -> None:
        self.policy = policy
        self._resolve = resolver
        self.refused: list[str] = []  # why each refused request was refused
        self.connected: list[str] = []  # ``address:port`` of each connection made
        self._open: set[asyncio.StreamWriter] = set()

    async def serve(self, path: Path) -> asyncio.Server:
        return await asyncio.start_unix_server(self._handle, path=str(path), limit=MAX_HEAD_BYTES)

    def close_connections(self) -> None:
        for writer in list(self._open):
            writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, status: str, reason: str) -> None:
        self.refused.append(reason)
        log.warning("egress refused: %s", reason)
        writer.write(_answer(status, reason))
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await self._proxy(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.discard(writer)
            writer.close()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.LimitOverrunError, TimeoutError):
            await self._refuse(writer, "400 Bad Request", "no complete request head")
            return
        request = parse_request(head)
        if isinstance(request, BadRequest):
            await self._refuse(writer, "400 Bad Request", request.reason)
            return
        refusal = host_refusal(self.policy, request.host, request.port)
        if refusal is not None:
            await self._refuse(writer, "403 Forbidden", refusal)
            return
        address = await self._checked_address(writer, request.host, request.port)
        if address is None:
            return
        try:
            upstream_reader, upstream = await asyncio.wait_for(
                asyncio.open_connection(address, request.port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            await self._refuse(writer, "502 Bad Gateway", f"{request.host}: {exc}")
            return
        self.connected.append(f"{address}:{request.port}")
        log.info("egress to %s:%s (%s)", request.host, request.port, address)
        self._open.add(upstream)
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                upstream.write(request.forward_head)
            await asyncio.gather(_pipe(reader, upstream), _pipe(upstream_reader, writer))
        finally:
            self._open.discard(upstream)
            upstream.close()

    async def _checked_address(
        self, writer: asyncio.StreamWriter, host: str, port: int
    ) -> str | None:
        """The address to connect to: the name resolved here, every answer checked."""
        try:
            addresses = (
                [host]
                if ip_literal(host)
                else await asyncio.wait_for(self._resolve(host, port), RESOLVE_TIMEOUT_S)
            )
        except (OSError, TimeoutError) as exc:
            await self._refuse(writer, "502 Bad Gateway", f"{host} does not resolve ({exc})")
            return None
        if not addresses:
            await self._refuse(writer, "502 Bad Gateway", f"{host} does not resolve")
            return None
        for address in addresses:
            refusal = address_refusal(address, self.policy.networks)
            if refusal is not None:
                await self._refuse(writer, "403 Forbidden", f"{host}: {refusal}")
                return None
        return addresses[0]


@contextlib.asynccontextmanager
async def egress_socket(
    policy: EgressPolicy, resolver: Resolver = system_resolver
) -> AsyncIterator[Path]:
    """A proxy for one command, serving on ``<directory>/proxy.sock``; yields the directory
    (private to this process, removed with the proxy's connections when the command is done)."""
    directory = Path(tempfile.mkdtemp(prefix="wonder-egress-"))
    proxy = EgressProxy(policy, resolver)
    server = await proxy.serve(directory / SOCKET_NAME)
    try:
        yield directory
    finally:
        server.close()
        proxy.close_connections()
        shutil.rmtree(directory, ignore_errors=True)
