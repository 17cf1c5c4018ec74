"""The egress allow-list (``core.egress``): entries, URLs, and addresses after resolution."""

from __future__ import annotations

import ipaddress

import pytest

from core.egress import EgressPolicy, check_url, parse_entry, pin
from core.errors import InvalidInput, PermissionDenied

POLICY = EgressPolicy.of(
    ["api.example.com", "127.0.0.1:8000", "10.0.0.0/8", "[::1]:9000", "localhost"], "TEST_HOSTS"
)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1",
        "http://127.0.0.1:8000/llm/v1",
        "http://10.1.2.3:5000/x",
        "http://[::1]:9000/",
        "http://localhost:1234/",  # the name passes; its address is checked once resolved
    ],
)
def test_listed_destinations_pass(url: str) -> None:
    check_url(url, POLICY)


@pytest.mark.parametrize(
    ("url", "error", "says"),
    [
        ("http://127.0.0.1:8001/v1", PermissionDenied, "127.0.0.1:8001"),
        ("https://evil.example.org/", PermissionDenied, "TEST_HOSTS"),
        ("http://[::ffff:127.0.0.1]:8001/", PermissionDenied, "127.0.0.1:8001"),
        ("file:///etc/passwd", InvalidInput, "http or https"),
        ("http://user:pw@api.example.com/", InvalidInput, "credentials"),
        ("http://api.example.com:99999/", InvalidInput, "not a valid URL"),
    ],
)
def test_unlisted_or_malformed_urls_are_refused(
    url: str, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says.replace("[", r"\[")):
        check_url(url, POLICY)


def test_a_name_never_vouches_for_a_private_address() -> None:
    target = check_url("https://api.example.com/v1", POLICY)
    for private in ("127.0.0.1", "169.254.169.254", "192.168.1.1", "::1", "100.64.0.1"):
        with pytest.raises(PermissionDenied, match="non-public address"):
            pin(target, [ipaddress.ip_address(private)], POLICY)
    pinned = pin(
        target, [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("93.184.216.34")], POLICY
    )
    assert pinned.url() == "https://93.184.216.34:443/v1"
    assert pinned.headers() == {"Host": "api.example.com"}
    assert pinned.extensions() == {"sni_hostname": "api.example.com"}


def test_a_loopback_name_reaches_only_listed_loopback_ports() -> None:
    listed = check_url("http://localhost:8000/", POLICY)
    assert (
        pin(listed, [ipaddress.ip_address("127.0.0.1")], POLICY).url() == "http://127.0.0.1:8000/"
    )
    other = check_url("http://localhost:8001/", POLICY)
    with pytest.raises(PermissionDenied):
        pin(other, [ipaddress.ip_address("127.0.0.1")], POLICY)


def test_entries_that_are_not_destinations_are_refused() -> None:
    for bad in ("http://x/", "a b", "host:70000"):
        with pytest.raises(ValueError):
            parse_entry(bad)


def test_a_malformed_allow_list_is_refused_when_settings_are_read() -> None:
    from pydantic import ValidationError

    from core.settings import Settings

    with pytest.raises(ValidationError, match="not a host"):
        Settings(model_allowed_hosts=["http://api.example.com/"])
