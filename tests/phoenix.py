"""A real Arize Phoenix for the tests: ``phoenix serve`` on 127.0.0.1, free ports, a temp dir.

Phoenix lives in its own virtual environment (``.venv-phoenix``, made by the Makefile from
``constraints-phoenix.txt``: its GraphQL library needs another ``graphql-core`` than the project's
dev dependencies). ``start_phoenix()`` runs it with its working dir (its SQLite database) in a temp
dir, telemetry and external resources off, and a guard (``tests/phoenix_guard``) that refuses any
connection or name lookup outside loopback and writes it down; it waits until ``/healthz`` answers.
``PhoenixServer.stop()`` stops the server and its children, then removes the temp dir.
``otel_env`` is what a process needs to export its spans there (OTLP/HTTP).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
PHOENIX_VENV = ROOT / ".venv-phoenix"
PHOENIX_PYTHON = PHOENIX_VENV / "bin" / "python"
GUARD = Path(__file__).resolve().parent / "phoenix_guard"
START_TIMEOUT_S = 300.0
"""Generous: its first start migrates a fresh SQLite database, on a loaded 2-core machine."""
STOP_TIMEOUT_S = 30.0


@dataclass
class PhoenixServer:
    port: int
    grpc_port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "phoenix.log"

    @property
    def egress_log(self) -> Path:
        return self.directory / "egress.log"

    def otel_env(self) -> dict[str, str]:
        """The standard OpenTelemetry variables that send a process's spans here."""
        return {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{self.url}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        }

    def refused(self) -> list[str]:
        """The outside connections the guard refused (none, unless Phoenix reached out)."""
        if not self.egress_log.exists():
            return []
        return self.egress_log.read_text(encoding="utf-8").splitlines()

    def stop(self) -> None:
        """SIGTERM to its process group (the server and its children), SIGKILL after a while."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
        _signal_group(self.process.pid, signal.SIGKILL)  # a child left behind
        shutil.rmtree(self.directory, ignore_errors=True)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def phoenix_environment(port: int, grpc_port: int, directory: Path) -> dict[str, str]:
    """Phoenix's own settings (``phoenix.config``), on a clean environment: none of this
    process's ``OTEL_*`` or ``PHOENIX_*`` variables reach it."""
    kept = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {
        **kept,
        "PYTHONPATH": str(GUARD),  # sitecustomize: loopback only
        "WONDER_PHOENIX_EGRESS_LOG": str(directory / "egress.log"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(directory / "work"),
        "PHOENIX_TELEMETRY_ENABLED": "false",  # no FullStory / Scarf pixels
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # no fonts, no downloads, no telemetry
        "NO_PROXY": "127.0.0.1,localhost",
    }


def start_phoenix() -> PhoenixServer:
    if not PHOENIX_PYTHON.exists():
        raise RuntimeError(
            f"{PHOENIX_VENV} is missing: `make test` makes it (pip install of arize-phoenix "
            "pinned by constraints-phoenix.txt)"
        )
    directory = Path(tempfile.mkdtemp(prefix="wonder-phoenix-"))
    port, grpc_port = free_port(), free_port()
    with open(directory / "phoenix.log", "wb") as log:
        process = subprocess.Popen(
            [str(PHOENIX_PYTHON), "-m", "phoenix.server.main", "serve"],
            env=phoenix_environment(port, grpc_port, directory),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() reaches its children
        )
    server = PhoenixServer(port=port, grpc_port=grpc_port, directory=directory, process=process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(server.url):
        if process.poll() is not None or time.monotonic() > deadline:
            output = server.log.read_text(errors="replace")[-4000:]
            server.stop()
            raise RuntimeError(f"phoenix serve did not start:\n{output}")
        time.sleep(0.5)
    return server


def _answers(url: str) -> bool:
    try:
        response = httpx.get(f"{url}/healthz", timeout=5.0, trust_env=False)
    except httpx.HTTPError:
        return False
    return response.status_code == 200
