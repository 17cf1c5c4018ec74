"""Where a sandboxed command may connect: the rules of its egress proxy (pure: no sockets, no DNS).

A ``shell.exec`` sandbox has a network namespace of its own, with only loopback. When the agent's
persona names hosts (``constraints.shell_hosts``) that the operator's policy also allows, the
command reaches them through an HTTP proxy Wonder runs on the host (``actors.workspace.egress``),
and only through it. For each request the proxy asks, in order:

1. ``parse_request``: a ``CONNECT host:port`` or an absolute-form ``GET http://host/...``;
2. ``host_refusal``: the host (and port) must match the persona's hosts *and* the operator's;
3. it resolves the name itself, then ``address_refusal`` for every address: loopback,
   link-local, private, shared, multicast, reserved and unspecified addresses (IPv4 and IPv6,
   IPv4-mapped, 6to4, Teredo and NAT64 forms included) are refused unless they fall in a network
   the operator lists. Only then does it connect, to the address it checked (never to the name
   again, so a second DNS answer cannot redirect it).

Host patterns: ``example.com`` (that name), ``*.example.com`` (names under it, not itself), ``*``
(any name), an IP literal (``[...]`` for IPv6), each optionally with ``:port``. Without a port, an
operator's pattern allows the policy's ``ports`` (default 80 and 443) and a persona's any port (the
operator's patterns decide): a persona's ``*`` means "whatever the operator allows".
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pydantic import Field

from core.domain import Model

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HEAD_BYTES = 16_384
DEFAULT_PORTS = (80, 443)
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EgressPolicy(Model):
    """What one command may reach: hosts both lists allow, addresses the rules allow."""

    persona_hosts: list[str] = Field(description="What the persona asks for (it narrows)")
    operator_hosts: list[str] = Field(description="What the operator allows this client")
    networks: list[str] = Field(
        default_factory=list,
        description="Networks the operator opens although they are not public (CIDR)",
    )
    ports: list[int] = Field(default_factory=lambda: list(DEFAULT_PORTS))


def _split_port(pattern: str) -> tuple[str, str | None]:
    """``host[:port]`` (``[v6]:port`` for IPv6) → ``(host, port text)``."""
    text = pattern.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, None


def _port(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and 0 < int(text) < 65536 else None


def ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(normalise_host(host))
    except ValueError:
        return False
    return True


def normalise_host(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def _host_matches(pattern: str, host: str) -> bool:
    if pattern in ("*", "any"):
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == normalise_host(pattern)


def matches(patterns: list[str], host: str, port: int, default_ports: list[int] | None) -> bool:
    """Whether ``host:port`` is among ``patterns`` (a pattern without a port allows
    ``default_ports``, or any port when that is None)."""
    name = normalise_host(host)
    for entry in patterns:
        pattern, pinned = _split_port(entry)
        if pinned is not None:
            allowed_port = port == _port(pinned)
        else:
            allowed_port = default_ports is None or port in default_ports
        if allowed_port and _host_matches(pattern, name):
            return True
    return False


def host_refusal(policy: EgressPolicy, host: str, port: int) -> str | None:
    """Why ``host:port`` may not be asked for (None: it may)."""
    if not 0 < port < 65536:
        return f"port {port} is not a port"
    if not matches(policy.persona_hosts, host, port, None):
        return f"{host}:{port} is not among the persona's shell_hosts"
    if not matches(policy.operator_hosts, host, port, policy.ports):
        return f"{host}:{port} is not allowed by the operator's policy for this client"
    return None


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _not_public(address: IpAddress) -> str | None:
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:
        return "private"
    return None


def address_refusal(address: str, networks: list[str]) -> str | None:
    """Why a connection to ``address`` is refused (None: it may be made).

    An address in one of the operator's ``networks`` is allowed; any other address must be
    public, and so must the IPv4 address an IPv6 form carries.
    """
    try:
        ip = ipaddress.ip_address(normalise_host(address).split("%", 1)[0])
    except ValueError:
        return f"{address} is not an IP address"
    inner = embedded_ipv4(ip)
    opened = [ipaddress.ip_network(n, strict=False) for n in networks]
    for candidate in (ip, inner):
        if candidate is not None and any(
            candidate.version == n.version and candidate in n for n in opened
        ):
            return None
    for candidate in (inner, ip):  # what an IPv6 form carries says more than its prefix
        if candidate is not None and (kind := _not_public(candidate)) is not None:
            return f"{address} is not a public address ({kind})"
    return None


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """One request to the proxy: ``CONNECT`` (a tunnel) or a plain HTTP request to forward,
    whose head is rewritten to the origin form the server expects."""

    method: str
    host: str
    port: int
    forward_head: bytes = b""


@dataclass(frozen=True, slots=True)
class BadRequest:
    reason: str


def _host_port(authority: str, default_port: int) -> tuple[str, int] | None:
    host, port_text = _split_port(authority)
    port = default_port if port_text is None else _port(port_text)
    if not host or port is None or (":" in host and not authority.startswith("[")):
        return None  # no host, a bad port, or a bare IPv6 address (it needs brackets)
    return normalise_host(host), port


def _forward_head(method: str, target: str, version: str, rest: list[str]) -> tuple[str, bytes]:
    """The authority of an absolute-form target, and the head rewritten to origin form."""
    _, _, remainder = target.partition("://")
    authority, slash, path = remainder.partition("/")
    lines = [f"{method} {slash + path or '/'} {version}"]
    lines += [line for line in rest if not line.lower().startswith(("proxy-", "connection:"))]
    lines.append("Connection: close")
    return authority, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_request(head: bytes) -> ProxyRequest | BadRequest:
    """A request head (through its blank line) → what it asks for."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        return BadRequest("undecodable request")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return BadRequest("not an HTTP/1.x request line")
    method, target, version = parts
    if method == "CONNECT":
        found = _host_port(target, 443)
        if found is None or _split_port(target)[1] is None:  # CONNECT names its port
            return BadRequest("CONNECT needs host:port")
        return ProxyRequest(method, *found)
    if not target.lower().startswith("http://"):
        return BadRequest("only CONNECT and absolute http:// requests go through this proxy")
    headers = [line for line in lines[1:] if line]
    authority, forward = _forward_head(method, target, version, headers)
    found = _host_port(authority, 80)
    if found is None:
        return BadRequest("no host in the request target")
    return ProxyRequest(method, found[0], found[1], forward)
