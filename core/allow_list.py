"""Entries of the operator's egress allow-lists (``core.egress``): a host name, an IP address or
a network, each with an optional port. Pure; ``core.settings`` validates its lists with it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One allowed destination: a name or a network, and a port (None: any)."""

    name: str | None
    network: IPNetwork | None
    port: int | None

    def matches_host(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == host
        address = as_address(host)
        return address is not None and self.network is not None and address in self.network

    def covers_address(self, address: IPAddress, port: int) -> bool:
        if self.network is None or (self.port is not None and self.port != port):
            return False
        return address in self.network


def as_address(host: str) -> IPAddress | None:
    """``host`` as an IP address (IPv4-mapped IPv6 as its IPv4), or None for a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_entry(text: str) -> AllowEntry:
    """An allow-list entry from its text (``ValueError`` naming it when it is not one)."""
    try:
        return _entry(text.strip().lower())
    except ValueError:
        raise ValueError(
            f"not a host, address or network (with an optional :port): {text!r}"
        ) from None


def _entry(raw: str) -> AllowEntry:
    host, port = _split_port(raw)
    if "/" in host:
        return AllowEntry(None, ipaddress.ip_network(host.strip("[]"), strict=False), port)
    address = as_address(host)
    if address is not None:
        return AllowEntry(None, ipaddress.ip_network(address), port)
    if not host or any(c in host for c in "@/?#[] :"):
        raise ValueError(raw)
    return AllowEntry(host.rstrip("."), None, port)


def _split_port(raw: str) -> tuple[str, int | None]:
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        return host, _port(rest[1:]) if rest.startswith(":") else None
    if raw.count(":") == 1:
        host, _, port = raw.partition(":")
        return host, _port(port)
    return raw, None  # a name, an IPv4 address or network, or a bare IPv6 address


def _port(text: str) -> int:
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(f"port out of range: {text}")
    return port
