"""Shared test helpers: ``wait_for``, free ports, and an isolated data dir per test session."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Tests never attach to a cluster that happens to run on this machine.
os.environ.pop("RAY_ADDRESS", None)
os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite uses the scripted model (a test double: off unless the operator enables it) and the
# callables of tests/callables.py (registered the way an operator adds a module), with the module
# docs/tutorials/custom-tool.md has a reader write, on the path the way the page puts it there.
TUTORIAL_TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tutorials", "tools")
LIBRARY_CALLABLES = '["tests.callables", "wordtools"]'
os.environ["WONDER_ALLOW_TEST_DOUBLES"] = "true"
os.environ["WONDER_LIBRARY_CALLABLES"] = LIBRARY_CALLABLES
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (os.environ.get("PYTHONPATH", ""), TUTORIAL_TOOLS) if p
)  # Ray's workers and the suite's subprocesses inherit it
sys.path.append(TUTORIAL_TOOLS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``condition`` until it is truthy; fail with the last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")
        time.sleep(interval)
        last = condition()
    return last


async def async_wait_for(
    condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")
        await asyncio.sleep(interval)
        last = condition()
    return last


# ---------------------------------------------------------------- one local Ray per session

import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# Node.js as installed by npm (package-lock.json): the stdio MCP servers of the protocol tests.
NODE_BIN = (Path(__file__).resolve().parents[1] / "node_modules" / ".bin" / "node").resolve()


@dataclass
class Cluster:
    """The session's local Ray: its settings (as env) and an open store on its database."""

    data_dir: Path
    env: dict[str, str]
    dashboard_url: str
    metrics_url: str = ""  # the node's Prometheus endpoint (Ray metrics, ``ray_`` prefixed)
    serve_port: int = 0  # where the session's Serve listens (chosen with the settings)
    model_ports: tuple[int, ...] = ()  # loopback ports model endpoints of tests may use
    tracing_env: dict[str, str] = field(default_factory=dict)  # OTLP export, when Phoenix runs

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        from core.settings import settings_from_env

        return settings_from_env(self.env)

    @property
    def store(self):  # type: ignore[no-untyped-def]
        from core.store import open_store

        return open_store(self.env)


_DASHBOARD: list[str] = []
TEST_CONVERSATION_IDLE_TTL_S = 30.0


def dashboard_url() -> str:
    """The dashboard of the session's Ray (for the state API: never guess among local clusters)."""
    return _DASHBOARD[0]


def _free_dashboard_agent_port() -> None:
    """Give the test Ray's dashboard agent a free port.

    ``ray.init`` has no argument for it and Ray's default (52365) is fixed: with another Ray on
    the machine (``wonder up``, a benchmark) the agent could not bind, and job submission would
    fail with "No available agent". ``ray start`` has ``--dashboard-agent-listen-port``; here the
    parameters ``ray.init`` builds get the same setting.
    """
    from ray._private import parameter

    original = parameter.RayParams.__init__
    port = free_port()
    # The metrics and runtime-env agents' ports named too: left to them, the raylet waits a
    # fixed while for the ports they report, which their imports outlast on a loaded machine.
    agents = {"metrics_agent_port": free_port(), "runtime_env_agent_port": free_port()}

    def with_free_agent_port(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.dashboard_agent_listen_port == 52365:
            self.dashboard_agent_listen_port = port
        for name, agent_port in agents.items():
            if not getattr(self, name):
                setattr(self, name, agent_port)

    parameter.RayParams.__init__ = with_free_agent_port  # type: ignore[method-assign]


PHOENIX_TESTS = Path(__file__).resolve().parent / "e2e" / "test_phoenix_trace.py"
"""Collected only in a session of their own (``make test`` names the file): a session with them
starts Phoenix before its Ray, and every process of that Ray then exports its spans to it."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.resolve() != PHOENIX_TESTS:
        return None
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return PHOENIX_TESTS not in named or None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database",
        choices=["sqlite", "postgresql"],
        default="sqlite",
        help="the relational store of the session's Ray (integration tier): a SQLite file in the "
        "session's data dir, or a database on a PostgreSQL server the tests start themselves",
    )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A real PostgreSQL server (Debian's binaries) on 127.0.0.1 for the session."""
    from tests.postgres import start_postgres

    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """A real Redis server (Debian's ``redis-server``) on 127.0.0.1, a free port and its own temp
    dir, stopped by its PID after the session."""
    from cluster.local_services import start_redis

    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


def _session_database_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """``WONDER_DATABASE_URL`` for ``--database=postgresql`` (a fresh database), else nothing."""
    if request.config.getoption("--database") != "postgresql":
        return {}
    server = request.getfixturevalue("postgres_server")
    return {"WONDER_DATABASE_URL": server.create_database()}


@pytest.fixture(scope="session")
def phoenix() -> Iterator[Any]:
    """A real Arize Phoenix (``tests/phoenix.py``) on 127.0.0.1 for the session. When a collected
    test uses it, the session's Ray starts after it, with every process exporting its spans
    there (``ray_cluster``), and it stops after that Ray."""
    from tests.phoenix import start_phoenix

    server = start_phoenix()
    try:
        yield server
    finally:
        server.stop()


def _session_tracing_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The OTLP variables that point every process of the session's Ray at the session's
    Phoenix, when a collected test uses it; else nothing (no process exports)."""
    if not any("phoenix" in getattr(item, "fixturenames", ()) for item in request.session.items):
        return {}
    return dict(request.getfixturevalue("phoenix").otel_env())


@pytest.fixture(scope="session")
def ray_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One real local Ray for the whole test session (≈10 s to start)."""
    import ray

    from core.client_secrets import ensure_key_file

    data_dir = Path(tempfile.mkdtemp(prefix="wonder-test-"))
    ensure_key_file(data_dir / "secrets.key")  # the operator's key sealing client secrets
    ray_tmp = tempfile.mkdtemp(prefix="wr", dir="/tmp")
    # The operator lets clients name (and clone over file://) repositories the tests make in
    # their tmp_path; nothing else of the host.
    repositories = request.getfixturevalue("tmp_path_factory").getbasetemp()
    # Model endpoints the operator allows (WONDER_MODEL_ALLOWED_HOSTS): the session's Serve (its
    # /llm/v1) and a few loopback ports tests may listen on; any other port is refused.
    serve_port, model_ports = free_port(), tuple(free_port() for _ in range(3))
    model_hosts = [f"127.0.0.1:{p}" for p in (serve_port, *model_ports)] + ["localhost"]
    env = {
        **_session_database_env(request),
        "WONDER_DATA_DIR": str(data_dir),
        # Short: an idle resident actor costs its process's upkeep (≈ 0.5 % of a core each),
        # and at 600 s most of the cap would sit idle through the session; a conversation a test
        # comes back to later is started again, as in production.
        "WONDER_CONVERSATION_IDLE_TTL_S": str(TEST_CONVERSATION_IDLE_TTL_S),
        "WONDER_SCHEDULER_TICK_S": "1",
        "WONDER_MAX_RESIDENT_CONVERSATIONS": "64",
        "WONDER_HTTP_ALLOWED_HOSTS": '["127.0.0.1"]',
        "WONDER_PROJECT_PATH_ROOTS": json.dumps([str(repositories)]),
        "WONDER_PROJECT_URL_SCHEMES": '["https", "file"]',
        "WONDER_MODEL_ALLOWED_HOSTS": json.dumps(model_hosts),
        # The MCP servers the protocol tests start listen on loopback, listed by address.
        "WONDER_MCP_ALLOWED_HOSTS": '["127.0.0.1"]',
        # The one program stdio MCP servers of the protocol tests run: the npm-installed Node.
        "WONDER_MCP_STDIO_COMMANDS": json.dumps([str(NODE_BIN)]),
        "WONDER_ALLOW_TEST_DOUBLES": "true",
        "WONDER_LIBRARY_CALLABLES": LIBRARY_CALLABLES,
        "RAY_AUTH_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    os.environ.update(env)
    # Only Ray's processes export (this process's own spans, and its unit tests, stay local).
    tracing_env = _session_tracing_env(request)
    dashboard_port, metrics_port = free_port(), free_port()
    _DASHBOARD[:] = [f"http://127.0.0.1:{dashboard_port}"]
    _free_dashboard_agent_port()
    ray.init(
        num_cpus=4,
        namespace="wonder",
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port,
        _temp_dir=ray_tmp,
        # The node's metrics agent serves every process's Ray metrics here (Prometheus text), a
        # report interval (10 s) after they are recorded; unset, Ray picks a port it only tells
        # the node object.
        _metrics_export_port=metrics_port,
        runtime_env={"env_vars": {**env, **tracing_env}},
        log_to_driver=True,
        logging_config=ray.LoggingConfig(
            encoding="JSON", log_level="INFO", additional_log_standard_attrs=["name"]
        ),
    )
    # Ray's job server gives a job's driver the address recorded in its temp dir, which only
    # `ray start` writes; without it, it takes any GCS it sees among the machine's processes (a
    # second test session's, a `wonder up` head's), so a job could attach to another Ray.
    gcs_address = ray.get_runtime_context().gcs_address
    Path(ray_tmp, "ray_current_cluster").write_text(gcs_address)
    try:
        yield Cluster(
            data_dir=data_dir,
            env=env,
            dashboard_url=f"http://127.0.0.1:{dashboard_port}",
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            serve_port=serve_port,
            model_ports=model_ports,
            tracing_env=tracing_env,
        )
    finally:
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def serve_port(ray_cluster: Cluster) -> Iterator[int]:
    """Ray Serve started once on a free loopback port."""
    from ray import serve

    from cluster.niceness import serve_controller_options
    from core.settings import settings_from_env

    port = ray_cluster.serve_port or free_port()
    controller = serve_controller_options(settings_from_env(ray_cluster.env))
    serve.start(http_options={"host": "127.0.0.1", "port": port}, controller_options=controller)
    try:
        yield port
    finally:
        serve.shutdown()
