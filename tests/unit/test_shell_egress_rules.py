"""The egress proxy's rules (``core.shell_egress``, pure): which hosts, addresses and requests."""

from __future__ import annotations

import pytest

from core.domain import Constraints, Persona
from core.settings import Settings
from core.shell_egress import (
    BadRequest,
    EgressPolicy,
    ProxyRequest,
    address_refusal,
    host_refusal,
    parse_request,
)
from core.workspaces import egress_policy

POLICY = EgressPolicy(
    persona_hosts=["pypi.org", "*.pythonhosted.org", "git.example:8443", "*"],
    operator_hosts=["pypi.org", "*.pythonhosted.org", "git.example:8443", "[2001:db8::1]"],
)


@pytest.mark.parametrize(
    ("host", "port", "refused_by"),
    [
        ("pypi.org", 443, None),
        ("PyPI.org.", 80, None),  # case and a trailing dot do not matter
        ("pypi.org", 8080, "operator"),  # a pattern without a port: 80 and 443
        ("files.pythonhosted.org", 443, None),
        ("pythonhosted.org", 443, "operator"),  # *.domain: names under it, not itself
        ("evilpythonhosted.org", 443, "operator"),
        ("git.example", 8443, None),
        ("git.example", 443, "operator"),  # pinned to its port
        ("2001:db8::1", 443, None),
        ("example.com", 443, "operator"),  # the persona's "*" never widens the operator's list
        ("pypi.org", 0, "port"),
    ],
)
def test_a_host_must_be_allowed_by_the_persona_and_the_operator(
    host: str, port: int, refused_by: str | None
) -> None:
    refusal = host_refusal(POLICY, host, port)
    if refused_by is None:
        assert refusal is None
    else:
        assert refusal is not None and refused_by in refusal


def test_the_persona_narrows() -> None:
    narrow = POLICY.model_copy(update={"persona_hosts": ["pypi.org"]})
    assert host_refusal(narrow, "pypi.org", 443) is None
    refusal = host_refusal(narrow, "files.pythonhosted.org", 443)
    assert refusal is not None and "persona" in refusal


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # shared address space (carrier NAT)
        ("fc00::1", "private"),  # unique local
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "private"),  # documentation range: not global
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),  # Teredo of 10.0.0.1
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("fe80::1%eth0", "link-local"),
    ],
)
def test_addresses_that_are_not_public_are_refused(address: str, kind: str) -> None:
    refusal = address_refusal(address, [])
    assert refusal is not None and f"({kind})" in refusal, refusal


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_refusal(address, []) is None


def test_the_operator_opens_networks() -> None:
    assert address_refusal("127.0.0.1", ["127.0.0.1/32"]) is None
    assert address_refusal("::ffff:127.0.0.1", ["127.0.0.0/8"]) is None  # the mapped form too
    assert address_refusal("127.0.0.2", ["127.0.0.1/32"]) is not None
    assert address_refusal("10.1.2.3", ["10.0.0.0/8"]) is None
    assert address_refusal("not-an-address", []) is not None


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n", ("CONNECT", "pypi.org", 443)),
        (b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", ("CONNECT", "::1", 8443)),
        (
            b"GET http://example.org/a?b=c HTTP/1.1\r\nHost: example.org\r\n\r\n",
            ("GET", "example.org", 80),
        ),
        (b"POST http://example.org:8080/ HTTP/1.0\r\n\r\n", ("POST", "example.org", 8080)),
    ],
)
def test_requests_the_proxy_takes(head: bytes, expected: tuple[str, str, int]) -> None:
    request = parse_request(head)
    assert isinstance(request, ProxyRequest)
    assert (request.method, request.host, request.port) == expected


def test_a_forwarded_request_is_rewritten_to_origin_form() -> None:
    head = (
        b"GET http://example.org/a?b=c HTTP/1.1\r\nHost: example.org\r\n"
        b"Proxy-Authorization: x\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n"
    )
    request = parse_request(head)
    assert isinstance(request, ProxyRequest)
    assert request.forward_head == (
        b"GET /a?b=c HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT pypi.org HTTP/1.1\r\n\r\n",  # no port
        b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",  # IPv6 without brackets
        b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://example.org/ HTTP/1.1\r\n\r\n",  # TLS goes through CONNECT
        b"GET ftp://example.org/ HTTP/1.1\r\n\r\n",
        b"NONSENSE\r\n\r\n",
        b"GET http:///nohost HTTP/1.1\r\n\r\n",
    ],
)
def test_requests_the_proxy_refuses(head: bytes) -> None:
    assert isinstance(parse_request(head), BadRequest)


def test_a_command_has_network_only_where_persona_and_operator_both_name_hosts() -> None:
    asks = Persona(id="p", system_prompt="x", constraints=Constraints(shell_hosts=["pypi.org"]))
    silent = Persona(id="p", system_prompt="x")
    operator = Settings(shell_allowed_hosts=["pypi.org"])  # type: ignore[call-arg]
    nobody = Settings()  # type: ignore[call-arg]
    per_client = Settings(shell_client_hosts={"c2": ["*.example"]})  # type: ignore[call-arg]
    assert egress_policy(nobody, asks, "c1") is None  # the operator allows nothing by default
    assert egress_policy(operator, silent, "c1") is None
    assert egress_policy(operator, None, "c1") is None
    policy = egress_policy(operator, asks, "c1")
    assert policy is not None and policy.operator_hosts == ["pypi.org"]
    assert egress_policy(per_client, asks, "c1") is None
    chosen = egress_policy(per_client, asks, "c2")
    assert chosen is not None and chosen.operator_hosts == ["*.example"]
