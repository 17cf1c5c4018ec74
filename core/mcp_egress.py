"""Where an MCP server registered over HTTP may be: the operator's allow-list
(``WONDER_MCP_ALLOWED_HOSTS``), under the platform's egress rules (docs/security.md).

An entry is a host name (``mcp.example.com``), an IP address (``127.0.0.1``, ``::1``) or a
network (``10.0.0.0/8``), each optionally with ``:port`` (without one, any port). A URL passes
when its scheme is http or https, it carries no credentials, and its host matches an entry; then
its name is resolved and every address it resolves to must be public, or covered by an *address*
entry (a name entry never vouches for a loopback, private, link-local or reserved address: DNS
can change). An http connection then goes to the checked address itself (``Pinned``), so a second
resolution cannot swap it; an https one goes by name (its certificate names the host) after the
same check of every address.

Everything here but ``resolve`` is pure.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from core.errors import InvalidInput, PermissionDenied, RetryableError

SETTING = "WONDER_MCP_ALLOWED_HOSTS"
DEFAULT_PORTS = {"http": 80, "https": 443}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One allow-list entry: a host name or a network (an address is a /32 or /128)."""

    host: str | None
    network: IPNetwork | None
    port: int | None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host is not None:
            return self.host == host
        address = as_address(host)
        return address is not None and self.covers(address, port)

    def covers(self, address: IPAddress, port: int) -> bool:
        """Whether this is an address entry vouching for ``address``."""
        if self.network is None or (self.port is not None and self.port != port):
            return False
        return address.version == self.network.version and address in self.network


def as_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def parse_entry(text: str) -> AllowEntry:
    """``host``, ``host:port``, ``[v6]:port``, an address or a network; ``ValueError`` else."""
    raw = text.strip().lower()
    port: int | None = None
    if raw.startswith("["):
        inner, _, rest = raw[1:].partition("]")
        raw, port = inner, (int(rest[1:]) if rest.startswith(":") else None)
    elif raw.count(":") == 1:
        raw, _, port_text = raw.partition(":")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{text!r}: port out of range")
    try:
        return AllowEntry(None, ipaddress.ip_network(raw, strict=False), port)
    except ValueError:
        pass
    if not raw or not all(part.isalnum() or "-" in part for part in raw.split(".")):
        raise ValueError(f"{text!r} is not a host, an address or a network")
    return AllowEntry(raw.rstrip("."), None, port)


def policy_of(items: Iterable[str]) -> tuple[AllowEntry, ...]:
    return tuple(parse_entry(item) for item in items if item.strip())


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    scheme: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Pinned:
    """A checked target and the URL and ``Host`` header a connection uses."""

    target: Target
    url: str
    headers: dict[str, str]


def check_url(url: str, entries: tuple[AllowEntry, ...]) -> Target:
    """``url`` when its host is listed (and, for an address, allowed); else ``InvalidInput`` or
    ``PermissionDenied`` naming the host and the setting."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInput("url is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise InvalidInput("url must be an http or https URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("url must not carry credentials (use secret_headers)")
    host = parts.hostname.lower().rstrip(".")
    address = as_address(host)
    host = str(address) if address is not None else host
    target = Target(url, scheme, host, port or DEFAULT_PORTS[scheme])
    if not any(entry.matches(target.host, target.port) for entry in entries):
        raise PermissionDenied(
            f"url: host {target.host}:{target.port} is not on the operator's allow-list ({SETTING})"
        )
    if address is not None:
        check_address(target, address, entries)
    return target


def check_address(target: Target, address: IPAddress, entries: tuple[AllowEntry, ...]) -> None:
    """``PermissionDenied`` unless ``address`` is public or an address entry covers it."""
    if address.is_global and not address.is_multicast:
        return
    if any(entry.covers(address, target.port) for entry in entries):
        return
    raise PermissionDenied(
        f"url: host {target.host}:{target.port} is at {address}, a non-public address the "
        f"operator has not listed ({SETTING})"
    )


def pin(target: Target, addresses: list[IPAddress], entries: tuple[AllowEntry, ...]) -> Pinned:
    """Every address checked; http goes to the first one itself, https by name."""
    if not addresses:
        raise RetryableError(f"host {target.host} has no address")
    for address in addresses:
        check_address(target, address, entries)
    if target.scheme == "https":
        return Pinned(target, target.url, {})
    parts = urlsplit(target.url)
    first = addresses[0]
    host = f"[{first}]" if first.version == 6 else str(first)
    url = urlunsplit((parts.scheme, f"{host}:{target.port}", parts.path, parts.query, ""))
    shown = f"[{target.host}]" if ":" in target.host else target.host
    host_header = shown if target.port == DEFAULT_PORTS["http"] else f"{shown}:{target.port}"
    return Pinned(target, url, {"Host": host_header})


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


async def checked(url: str, entries: tuple[AllowEntry, ...]) -> Pinned:
    """``url`` checked, resolved and pinned (the check again before each connection)."""
    target = check_url(url, entries)
    return pin(target, await resolve(target), entries)
