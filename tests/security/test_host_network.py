"""A sandboxed command never shares the host's network: egress goes only through the filtering
proxy, to hosts both the persona and the operator allow, never to loopback, link-local or private
addresses unless the operator lists them.

The commands run in real bubblewrap sandboxes (a real ``shell.exec`` task on the session's Ray).
Every server they try lives on the host's loopback and is started here; nothing leaves 127.0.0.1:
the refusals of other addresses are proved before any connection is made.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from cluster import wiring
from core.projects import create_project
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_workspaces import Session, new_agent, new_conversation

# Run inside the sandbox: each probe prints one line, "ok:<body>" or why it failed.
PROBE = r"""
import json, os, socket, sys, urllib.error, urllib.request

# Loopback names go direct by default (the sandbox's own services): these probes mean the proxy.
for name in ("no_proxy", "NO_PROXY"):
    os.environ.pop(name, None)

def direct(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return "ok:" + s.recv(200).decode(errors="replace").splitlines()[0]
    except OSError as e:
        return "closed:" + type(e).__name__

def via_proxy(url):
    proxy = urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"})
    try:
        return "ok:" + urllib.request.build_opener(proxy).open(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return "refused:%d:%s" % (e.code, e.read().decode().strip())
    except OSError as e:
        return "error:" + str(e)

def tunnel(host, port):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    except OSError as e:
        return "error:" + str(e)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, port, host)).encode())
    answer = s.recv(4096).decode(errors="replace")
    code = answer.split("\r\n")[0].split(" ")[1]
    if code != "200":
        return "refused:%s:%s" % (code, answer.split("\r\n\r\n")[-1].strip())
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return "ok:" + data.decode(errors="replace").split("\r\n\r\n", 1)[-1]

for kind, *args in json.loads(sys.argv[1]):
    print({"direct": direct, "via_proxy": via_proxy, "tunnel": tunnel}[kind](*args), flush=True)
"""


class PongHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"pong from {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def host_servers() -> Iterator[list[int]]:
    """Two HTTP servers on the host's loopback (the kind of service a sandbox must not reach)."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), PongHandler) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield [int(s.server_address[1]) for s in servers]
    for server in servers:
        server.shutdown()
        server.server_close()


class OperatedSession(Session):
    """A conversation's tool calls under settings of the test's choosing (the operator's)."""

    def __init__(self, cluster: Cluster, env: dict[str, str], shell_hosts: list[str]) -> None:
        store = cluster.store
        client_id, _ = make_client(store, "egress")
        project = create_project(store, cluster.settings, client_id=client_id, name="egress")
        agent = new_agent(store, client_id, [project.id], shell_hosts=shell_hosts)
        super().__init__(cluster, new_conversation(store, agent, project.id), agent.id, env)

    def probe(self, *probes: list[Any]) -> list[str]:
        self.ok("repo.write", path="probe.py", content=PROBE)
        ran = self.sh(f"python3 probe.py '{json.dumps(list(probes))}'", timeout_s=60)
        lines: list[str] = ran["stdout"].splitlines()
        assert len(lines) == len(probes), ran
        return lines

    def stop(self) -> None:
        wiring.workspaces(self.env).stop(self.conversation.id)


def operator(hosts: list[str], networks: list[str] | None = None) -> dict[str, str]:
    return {
        "WONDER_SHELL_ALLOWED_HOSTS": json.dumps(hosts),
        "WONDER_SHELL_EGRESS_NETWORKS": json.dumps(networks or []),
    }


def test_the_hosts_loopback_is_out_of_reach_even_for_a_persona_that_asks_for_it(
    ray_cluster: Cluster, host_servers: list[int]
) -> None:
    """The persona names the host's loopback and the operator allows those hosts, but lists no
    loopback network: nothing reaches the host's services, neither directly nor by the proxy."""
    port = host_servers[0]
    dashboard = urlparse(ray_cluster.dashboard_url).port
    names = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{dashboard}"]
    session = OperatedSession(ray_cluster, operator(names), shell_hosts=names)
    try:
        results = session.probe(
            ["direct", port],
            ["direct", dashboard],
            ["via_proxy", f"http://127.0.0.1:{port}/"],
            ["via_proxy", f"http://localhost:{port}/"],
            ["tunnel", "127.0.0.1", port],
            ["tunnel", "[::1]", port],
            ["via_proxy", f"http://127.0.0.1:{dashboard}/"],
        )
    finally:
        session.stop()
    assert results[0] == "closed:ConnectionRefusedError", results  # its own, empty loopback
    assert results[1] == "closed:ConnectionRefusedError", results  # no Ray dashboard either
    for refused in results[2:]:
        assert refused.startswith("refused:403") and "(loopback)" in refused, results


def test_an_operator_listed_loopback_host_is_reached_through_the_proxy_only(
    ray_cluster: Cluster, host_servers: list[int]
) -> None:
    """The allow path, proved without leaving loopback: the operator lists one host and its
    network; the persona may narrow the operator's hosts, never widen them."""
    allowed, other = host_servers
    hosts = [f"127.0.0.1:{allowed}", f"127.0.0.1:{other}"]
    session = OperatedSession(
        ray_cluster,
        operator(hosts, networks=["127.0.0.1/32"]),
        shell_hosts=[f"127.0.0.1:{allowed}", f"localhost:{other}", "*"],
    )
    try:
        results = session.probe(
            ["via_proxy", f"http://127.0.0.1:{allowed}/"],
            ["tunnel", "127.0.0.1", allowed],
            ["direct", allowed],
            ["via_proxy", f"http://127.0.0.1:{other}/"],  # the persona's "*": as the operator
            ["via_proxy", f"http://localhost:{other}/"],  # the operator did not list the name
            ["via_proxy", f"http://127.0.0.1:{allowed + 1}/"],  # a port nobody listed
        )
        narrow = OperatedSession(
            ray_cluster,
            operator(hosts, networks=["127.0.0.1/32"]),
            shell_hosts=[f"127.0.0.1:{allowed}"],
        )
        try:
            narrowed = narrow.probe(["via_proxy", f"http://127.0.0.1:{other}/"])
        finally:
            narrow.stop()
    finally:
        session.stop()
    assert results[0] == f"ok:pong from {allowed}", results
    assert results[1] == f"ok:pong from {allowed}", results
    assert results[2] == "closed:ConnectionRefusedError", results
    assert results[3] == f"ok:pong from {other}", results
    assert results[4].startswith("refused:403") and "operator" in results[4], results
    assert results[5].startswith("refused:403") and "operator" in results[5], results
    assert narrowed[0].startswith("refused:403") and "persona" in narrowed[0], narrowed


def test_without_hosts_allowed_by_both_there_is_no_network_at_all(
    ray_cluster: Cluster, host_servers: list[int]
) -> None:
    port = host_servers[0]
    for env, asked in (
        (operator([]), [f"127.0.0.1:{port}"]),  # the operator allows nothing
        (operator([f"127.0.0.1:{port}"], ["127.0.0.1/32"]), []),  # the persona asks nothing
    ):
        session = OperatedSession(ray_cluster, env, shell_hosts=asked)
        try:
            direct, proxied = session.probe(
                ["direct", port], ["via_proxy", f"http://127.0.0.1:{port}/"]
            )
            variables = session.sh("env | grep -ci proxy; true")["stdout"].strip()
        finally:
            session.stop()
        assert direct == "closed:ConnectionRefusedError", (asked, direct)
        assert proxied.startswith("error:") and "refused" in proxied.lower(), (asked, proxied)
        assert variables == "0"
