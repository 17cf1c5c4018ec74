"""Where a request came from (``core.client_address``): X-Forwarded-For is believed only from a
proxy the operator trusts, and only up to the first hop that is not one."""

from __future__ import annotations

import pytest

from core.client_address import client_address, parse_networks

PROXIES = parse_networks("10.0.0.0/8, 127.0.0.1")


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "expected"),
    [
        ("203.0.113.7", None, PROXIES, "203.0.113.7"),  # no header: the peer
        # A client that writes the header itself is not a proxy: ignored.
        ("203.0.113.7", "198.51.100.1", PROXIES, "203.0.113.7"),
        # Nothing trusted (the default): the header is never read, whoever sends it.
        ("127.0.0.1", "198.51.100.1", (), "127.0.0.1"),
        ("127.0.0.1", "198.51.100.1", PROXIES, "198.51.100.1"),  # one trusted proxy
        # Two trusted hops: the first untrusted address from the right is the client; what the
        # client wrote at the left (a forged 1.2.3.4) is not believed.
        ("127.0.0.1", "1.2.3.4, 198.51.100.1, 10.1.2.3", PROXIES, "198.51.100.1"),
        ("127.0.0.1", "10.0.0.5, 10.0.0.6", PROXIES, "127.0.0.1"),  # every hop trusted: the peer
        ("127.0.0.1", "not-an-ip", PROXIES, "127.0.0.1"),  # malformed: believe nothing
        ("127.0.0.1", "::1", parse_networks("127.0.0.1"), "::1"),
        (None, "198.51.100.1", PROXIES, None),
    ],
)
def test_client_address(
    peer: str | None, forwarded: str | None, trusted: tuple[object, ...], expected: str | None
) -> None:
    assert client_address(peer, forwarded, trusted) == expected  # type: ignore[arg-type]


def test_networks_parse_or_say_which_entry_is_bad() -> None:
    assert [str(n) for n in parse_networks(" 192.168.0.0/16 ,::1,")] == [
        "192.168.0.0/16",
        "::1/128",
    ]
    with pytest.raises(ValueError, match=r"'proxy\.local'"):
        parse_networks("10.0.0.1, proxy.local")
