"""Where the platform itself may connect on a client's behalf: model providers' ``base_url``s,
``http.request`` and MCP servers over HTTP (docs/security.md "Egress").

The operator lists destinations (``WONDER_MODEL_ALLOWED_HOSTS``, ``WONDER_HTTP_ALLOWED_HOSTS``,
``WONDER_MCP_ALLOWED_HOSTS``): a host name (``api.example.com``), an IP address (``127.0.0.1``,
``[::1]``) or a network (``10.0.0.0/8``), each optionally with ``:port`` (without one, any
port). A URL passes when

1. its scheme is ``http`` or ``https``, it carries no credentials (``user:pw@``), and its host
   (with its port) matches an entry — checked where a URL is stored (``check_url``) and again
   before each connection; then
2. the name is resolved and the address used is checked (``check_address``): a public address
   passes; a loopback, private, link-local, shared, multicast or reserved one only when an
   *address* entry covers it (a name entry never vouches for what its name resolves to: DNS can
   change). The connection then goes to that very address (``pinned``), so a second resolution
   cannot swap it.

Everything here but ``resolve`` is pure.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from core.allow_list import AllowEntry, IPAddress, as_address, parse_entry
from core.errors import InvalidInput, PermissionDenied, RetryableError
from core.settings import Settings

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The destinations one kind of egress may reach; ``setting`` names where they are listed."""

    entries: tuple[AllowEntry, ...]
    setting: str

    @classmethod
    def of(cls, items: Iterable[str], setting: str) -> EgressPolicy:
        entries = []
        for item in items:
            if item.strip():
                try:
                    entries.append(parse_entry(item))
                except ValueError as exc:
                    raise ValueError(f"{setting}: {exc}") from None
        return cls(tuple(entries), setting)


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: where it points (``host`` lowercased, the port explicit)."""

    url: str
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"


def check_url(url: str, policy: EgressPolicy, what: str = "URL") -> Target:
    """``url`` as a ``Target`` when the policy lists its host; else ``InvalidInput`` (not an
    http(s) URL) or ``PermissionDenied`` naming the host and the setting."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{what} is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise InvalidInput(f"{what} must be an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(f"{what} must not carry credentials (user:password@)")
    host = parts.hostname.lower().rstrip(".")
    address = as_address(host)
    if address is not None:
        host = str(address)
    target = Target(url, scheme, host, port or DEFAULT_PORTS[scheme])
    if not any(e.matches_host(target.host, target.port) for e in policy.entries):
        raise PermissionDenied(
            f"{what}: host {target.host}:{target.port} is not on the operator's allow-list "
            f"({policy.setting})"
        )
    if address is not None:
        problem = check_address(target, address, policy)
        if problem is not None:
            raise PermissionDenied(problem)
    return target


def check_address(target: Target, address: IPAddress, policy: EgressPolicy) -> str | None:
    """Why ``target`` may not be reached at ``address`` (None: it may)."""
    if address.is_global and not address.is_multicast:
        return None
    if any(e.covers_address(address, target.port) for e in policy.entries):
        return None
    return (
        f"host {target.host}:{target.port} resolves to {address}, a non-public address the "
        f"operator has not listed ({policy.setting})"
    )


@dataclass(frozen=True, slots=True)
class Pinned:
    """A checked target and the checked address a connection to it must use."""

    target: Target
    address: IPAddress

    def url(self) -> str:
        """The target's URL with its host replaced by the address (the port kept)."""
        parts = urlsplit(self.target.url)
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return urlunsplit((parts.scheme, f"{host}:{self.target.port}", parts.path, parts.query, ""))

    def headers(self) -> dict[str, str]:
        return {"Host": self.target.host_header}

    def extensions(self) -> dict[str, str]:
        """For TLS: the name the certificate must match (and the SNI sent)."""
        return {"sni_hostname": self.target.host} if self.target.scheme == "https" else {}


def pin(target: Target, addresses: Iterable[IPAddress], policy: EgressPolicy) -> Pinned:
    """The first address ``target`` may be reached at; ``PermissionDenied`` when none."""
    problems = []
    for address in addresses:
        problem = check_address(target, address, policy)
        if problem is None:
            return Pinned(target, address)
        problems.append(problem)
    raise PermissionDenied(problems[0] if problems else f"host {target.host} has no address")


async def resolve(target: Target) -> list[IPAddress]:
    """The addresses ``target``'s host resolves to (its own, for an address)."""
    literal = as_address(target.host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RetryableError(f"host {target.host} did not resolve ({exc.strerror})") from None
    found: list[IPAddress] = []
    for info in infos:
        address = as_address(str(info[4][0]))
        if address is not None and address not in found:
            found.append(address)
    return found


async def checked(url: str, policy: EgressPolicy, what: str = "URL") -> Pinned:
    """``url`` checked against ``policy``, resolved, and pinned to an allowed address."""
    target = check_url(url, policy, what)
    return pin(target, await resolve(target), policy)


def model_egress(settings: Settings) -> EgressPolicy:
    """Where model providers' ``base_url``s may point: the operator's list and the local
    deployment (its own OpenAI-compatible ``/llm/v1`` at ``gateway_port`` on loopback)."""
    port = settings.gateway_port
    local = [f"127.0.0.1:{port}", f"[::1]:{port}", f"localhost:{port}"]
    return EgressPolicy.of([*local, *settings.model_allowed_hosts], "WONDER_MODEL_ALLOWED_HOSTS")


def http_egress(settings: Settings) -> EgressPolicy:
    """Where ``http.request`` may connect."""
    return EgressPolicy.of(settings.http_allowed_hosts, "WONDER_HTTP_ALLOWED_HOSTS")


def mcp_egress(settings: Settings) -> EgressPolicy:
    """Where an MCP server registered over HTTP may be (a list of its own: a server gets the
    client's credential headers and a session that lasts, which ``http.request``'s
    destinations need not be trusted with, nor the other way round)."""
    return EgressPolicy.of(settings.mcp_allowed_hosts, "WONDER_MCP_ALLOWED_HOSTS")
