"""The egress proxy refuses names that resolve inside, before any connection is made.

The proxy is the production one (``actors.workspace.egress``), reached on its unix socket as a
sandbox reaches it through its bridge. The names resolve through a table here, so no DNS query
leaves the machine and no connection is attempted to any address but loopback.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from actors.workspace.egress import EgressProxy
from core.shell_egress import EgressPolicy


async def test_names_that_resolve_to_internal_addresses_are_refused_before_connecting(
    tmp_path: Path,
) -> None:
    """The proxy resolves each name itself and refuses when any answer is not public (unless
    the operator lists its network): DNS answers pointing inside never get a connection. The
    names resolve through a table here (no DNS query leaves); the proxy is the production one, on
    its unix socket, as a sandbox reaches it."""
    table = {
        "intranet.example": ["10.1.2.3"],
        "metadata.example": ["169.254.169.254"],
        "mapped.example": ["::ffff:127.0.0.1"],
        "nat64.example": ["64:ff9b::a00:1"],
        "shared.example": ["100.64.0.1"],
        "mixed.example": ["93.184.215.14", "192.168.1.1"],
        "zero.example": ["0.0.0.0"],
        "multicast.example": ["ff02::1"],
    }

    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    policy = EgressPolicy(persona_hosts=["*"], operator_hosts=["*.example", "10.0.0.1"])
    proxy = EgressProxy(policy, resolve)
    server = await proxy.serve(tmp_path / "proxy.sock")
    answers = {}
    try:
        for host in [*table, "10.0.0.1"]:
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "proxy.sock"))
            writer.write(f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode())
            answers[host] = (await reader.read()).decode()
            writer.close()
    finally:
        server.close()
    assert proxy.connected == []  # not one connection was attempted
    for host, answer in answers.items():
        assert answer.startswith("HTTP/1.1 403"), (host, answer)
    assert "(private)" in answers["intranet.example"]
    assert "(link-local)" in answers["metadata.example"]
    assert "(loopback)" in answers["mapped.example"]
    assert "(private)" in answers["nat64.example"]
    assert "(private)" in answers["shared.example"]
    assert "192.168.1.1 is not a public address (private)" in answers["mixed.example"]
    assert "(unspecified)" in answers["zero.example"]
    assert "(multicast)" in answers["multicast.example"]
    assert "(private)" in answers["10.0.0.1"]
