"""Where a request came from, as the audit trail records it. Pure.

The address is the TCP peer the gateway's HTTP server saw. Behind a reverse proxy every peer is
the proxy, so an operator may name the proxies it trusts (``WONDER_TRUSTED_PROXIES``: addresses or
networks, comma-separated). Only when the peer is one of them is ``X-Forwarded-For`` read, from
the right: each hop a trusted proxy appended is skipped, and the first address that is not a
trusted proxy is the client. A client can write anything at the left of that header, so nothing
left of the first untrusted hop is believed; with no trusted proxies the header is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_FORWARDED_HOPS = 32


def parse_networks(text: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 127.0.0.1"`` → networks; ``ValueError`` naming a bad entry."""
    networks: list[Network] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"not an address or network: {entry!r}") from None
    return tuple(networks)


def _trusted(address: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def client_address(
    peer: str | None, forwarded_for: str | None, trusted: Sequence[Network]
) -> str | None:
    """The client's address: ``peer`` unless it is a trusted proxy, in which case the rightmost
    ``X-Forwarded-For`` hop that is not a trusted proxy (the peer when every hop is trusted or
    the header is absent or malformed)."""
    if peer is None or not forwarded_for or not _trusted(peer, trusted):
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",")][-MAX_FORWARDED_HOPS:]
    for hop in reversed(hops):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return peer  # a hop that is no address: believe nothing the header says
        if not _trusted(hop, trusted):
            return hop
    return peer
