"""MCP servers for the protocol tests, each on 127.0.0.1, started by the tests and stopped by its
PID: the reference server (npm ``@modelcontextprotocol/server-everything``, installed by ``make``
from package-lock.json) and a small one of our own (``mcp_test_server.py``: it shows the requests
it got and changes its tool list on demand)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
NODE = str((REPO / "node_modules" / ".bin" / "node").resolve())
EVERYTHING = str(REPO / "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
CONFORMANCE = str(REPO / "node_modules/@modelcontextprotocol/conformance/dist/index.js")
LOOPBACK_ONLY = str(REPO / "tests/integration/loopback_only.mjs")
TEST_SERVER = str(REPO / "tests/integration/mcp_test_server.py")


@dataclass
class NodeServer:
    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)


def start_everything_http() -> NodeServer:
    """``server-everything streamableHttp`` on a free loopback port; its MCP endpoint's URL."""
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port), "HOME": "/tmp"}
    process = subprocess.Popen(
        [NODE, "--import", LOOPBACK_ONLY, EVERYTHING, "streamableHttp"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = NodeServer(process, f"http://127.0.0.1:{port}/mcp")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1, trust_env=False)
            return server
        except httpx.TransportError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    server.stop()
    raise RuntimeError("the reference MCP server did not start")


@dataclass
class OwnServer(NodeServer):
    """``mcp_test_server.py``: ``seen()`` its requests, ``change()`` its tool list."""

    base: str = ""

    def seen(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = httpx.get(f"{self.base}/seen", trust_env=False).json()
        return answer

    def change(self) -> None:
        httpx.post(f"{self.base}/change", trust_env=False).raise_for_status()


def start_test_server(legacy: bool = False, hostile: bool = False) -> OwnServer:
    """Our own MCP server on a free loopback port (``legacy``: initialize-era protocol only;
    ``hostile``: tools and answers no client should trust)."""
    port = free_port()
    flags = [*(["--legacy"] if legacy else []), *(["--hostile"] if hostile else [])]
    argv = [sys.executable, TEST_SERVER, "--port", str(port), *flags]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    server = OwnServer(process, f"{base}/mcp", base)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            server.seen()
            return server
        except httpx.TransportError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    server.stop()
    raise RuntimeError("the test MCP server did not start")
