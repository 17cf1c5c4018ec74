"""Ray bootstrap: start a local head (or attach to ``WONDER_RAY_ADDRESS``), connect, stop.

A local head is ``ray start --head --block`` run as a child in its own session, so its process
group is ours alone; its PID, address and ports are recorded in ``<data_dir>/ray-head.json`` and
``stop_local_head`` signals exactly that group. Never ``ray stop``: it kills every Ray on the
machine. Token authentication is on (``RAY_AUTH_MODE=token``) unless the environment says
otherwise explicitly. A head we start uses its own token, ``<data_dir>/ray-auth-token`` (made on
first start, mode 0600, handed to Ray as ``RAY_AUTH_TOKEN_PATH``), unless ``RAY_AUTH_TOKEN`` or
``RAY_AUTH_TOKEN_PATH`` names one; attaching to ``WONDER_RAY_ADDRESS`` uses the environment's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from hashlib import sha256
from pathlib import Path

import ray

from cluster import processes
from cluster.ray_environment import auth_mode
from core.settings import Settings

Report = Callable[[str], None]

HEAD_FILE = "ray-head.json"
TOKEN_FILE = "ray-auth-token"
# Ray puts unix sockets under its temp dir; their paths must stay under ~107 bytes.
MAX_TEMP_DIR_CHARS = 40
HEAD_START_TIMEOUT_S = 120.0
# SIGTERM's grace: the workers that act on it exit within a second or two, while the GCS, the
# `ray start` process and Serve's controller and proxy wait 10 s or more. Nothing needs the wait
# (every step of a turn is durable before it is acknowledged), so the rest get SIGKILL after it.
HEAD_STOP_TIMEOUT_S = 3.0
HEAD_KILL_TIMEOUT_S = 5.0
# How soon the GCS declares a lost node dead (Ray reads these RAY_* variables at start; only the
# head's GCS uses them, every node may carry them). Ray's defaults check each raylet every 3 s and
# give up after 5 failures: a killed node is noticed after about 15 s, and its conversations wait
# that long to re-activate elsewhere. Here a raylet is checked every half second and declared
# dead after 3 failures in a row: a killed node (its port refuses at once) in about 1.5 s. The
# check after a failure waits for the failure (its timeout) and then the period, so the price is
# set by the timeout: a live raylet that cannot answer for about 7.5 s (3 x (2 s timeout + 0.5 s
# period)) and sends no resource report meanwhile is declared dead too, and Ray then kills its
# workers (Ray's defaults tolerate about 65 s). docs/deploy.md "Node loss"; `wonder up`,
# ray-cluster.yaml and deploy/rayservice.yaml use these values (tests/unit/test_deploy_files.py).
NODE_HEALTH_CHECK_ENV = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "3",
}


@dataclass(frozen=True)
class HeadInfo:
    """A local Ray head this data dir started."""

    pid: int
    address: str
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    log_file: str
    started_at: float
    token_path: str | None = None


def ray_process_env(token_path: str | None = None) -> dict[str, str]:
    """The environment for Ray processes we start: explicit auth, no stray address."""
    env = dict(os.environ)
    env["RAY_AUTH_MODE"] = auth_mode()
    env.pop("RAY_ADDRESS", None)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    for name, value in NODE_HEALTH_CHECK_ENV.items():
        env.setdefault(name, value)  # an operator's own choice wins
    if token_path is not None:
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    return env


def head_token(settings: Settings) -> str | None:
    """The token file a head we start uses; None when auth is off or the env names a token."""
    if auth_mode() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return None
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]
    path = settings.data_dir.resolve() / TOKEN_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return str(path)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def head_file(settings: Settings) -> Path:
    return settings.data_dir.resolve() / HEAD_FILE


def read_head(settings: Settings) -> HeadInfo | None:
    """The recorded local head, if its process is still alive."""
    path = head_file(settings)
    try:
        info = HeadInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return info if processes.pid_alive(info.pid) else None


def ray_temp_dir(settings: Settings) -> Path:
    """``<data_dir>/ray``, or a short per-data-dir path in /tmp when that would be too long."""
    preferred = settings.data_dir.resolve() / "ray"
    if len(str(preferred)) <= MAX_TEMP_DIR_CHARS:
        return preferred
    digest = sha256(str(preferred).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"wonder-ray-{digest}"


def ray_executable() -> list[str]:
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ray")
    return [found] if found else [sys.executable, "-m", "ray.scripts.scripts"]


def start_local_head(settings: Settings, report: Report) -> HeadInfo:
    """Start ``ray start --head --block`` in its own session and wait until it accepts clients."""
    running = read_head(settings)
    if running is not None:
        report(f"Ray head already running (pid {running.pid}, {running.address})")
        return running
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    temp_dir = ray_temp_dir(settings)
    temp_dir.mkdir(parents=True, exist_ok=True)
    _forget_stopped_session(temp_dir)
    gcs_port = free_port()
    dashboard_port = settings.dashboard_port
    if not port_is_free(dashboard_port):
        dashboard_port = free_port()
        report(f"dashboard port {settings.dashboard_port} is busy; using {dashboard_port}")
    command = [
        *ray_executable(), "start", "--head", "--block",
        "--port", str(gcs_port),
        "--node-ip-address", "127.0.0.1",
        "--temp-dir", str(temp_dir),
        "--include-dashboard", "true",
        "--dashboard-host", "127.0.0.1",
        "--dashboard-port", str(dashboard_port),
        # Ray's default agent port (52365) is fixed: a second Ray on the machine (a test run
        # beside `wonder up`) would lose its job agent to the clash. Pick a free one.
        "--dashboard-agent-listen-port", str(free_port()),
        "--disable-usage-stats",
    ]  # fmt: skip
    if settings.ray_num_cpus is not None:
        command += ["--num-cpus", str(settings.ray_num_cpus)]
    log_file = data_dir / "ray-head.log"
    token_path = head_token(settings)
    report(f"starting a local Ray head (auth {auth_mode()}, temp dir {temp_dir}, log {log_file})")
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=ray_process_env(token_path), start_new_session=True,
        )  # fmt: skip
    info = HeadInfo(
        pid=process.pid,
        address=f"127.0.0.1:{gcs_port}",
        gcs_port=gcs_port,
        dashboard_port=dashboard_port,
        temp_dir=str(temp_dir),
        log_file=str(log_file),
        started_at=time.time(),
        token_path=token_path,
    )
    head_file(settings).write_text(json.dumps(asdict(info), indent=2))
    _wait_for_head(process, info)
    report(f"Ray head is up (pid {info.pid}, {info.address})")
    return info


def _wait_for_head(process: subprocess.Popen[bytes], info: HeadInfo) -> None:
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ray start exited with {process.returncode}; see {info.log_file}")
        if not port_is_free(info.gcs_port) and _session_ready(Path(info.temp_dir)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not come up in {HEAD_START_TIMEOUT_S:.0f}s")


def _session_ready(temp_dir: Path) -> bool:
    """Whether the session's raylet accepts connections: workers and drivers can start.

    A socket file alone proves nothing: a head stopped by SIGKILL leaves its sockets behind, and
    ``session_latest`` points at that session until the new head replaces the link."""
    raylet = temp_dir / "session_latest" / "sockets" / "raylet"
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(raylet))
        except OSError:
            return False
    return True


def _forget_stopped_session(temp_dir: Path) -> None:
    """Remove ``session_latest`` when no head runs: it names a dead session's sockets."""
    (temp_dir / "session_latest").unlink(missing_ok=True)


def stop_local_head(settings: Settings, report: Report) -> bool:
    """Stop the head this data dir started and every process it started (its process group and
    their descendants: Ray's workers, Serve's proxy among them, live in groups of their own) and
    return once they are gone, their ports free; False if none was running."""
    path = head_file(settings)
    info = read_head(settings)
    if info is None:
        path.unlink(missing_ok=True)
        return False
    tree = processes.group_and_descendants(info.pid, processes.process_table())
    report(f"stopping the Ray head (pid {info.pid}) and its {len(tree) - 1} processes")
    # SIGTERM lets the raylet, the GCS and the workers shut down cleanly; what is left when the
    # time is up gets SIGKILL (the store survives it: every step is durable before it is acked).
    _signal_all(tree, signal.SIGTERM)
    if not _wait_gone(tree, HEAD_STOP_TIMEOUT_S):
        tree |= processes.group_and_descendants(info.pid, processes.process_table())
        _signal_all(tree, signal.SIGKILL)
        _wait_gone(tree, HEAD_KILL_TIMEOUT_S)
    path.unlink(missing_ok=True)
    return True


def _signal_all(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: set[int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(processes.pid_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def cluster_address(settings: Settings) -> str | None:
    """Where Wonder's Ray is: ``WONDER_RAY_ADDRESS``, else the head this data dir started."""
    if settings.ray_address:
        return settings.ray_address
    head = read_head(settings)
    return head.address if head else None


def connect(settings: Settings, address: str) -> None:
    """Attach this process to Ray at ``address`` in Wonder's namespace, with its settings."""
    # The auth mode was set when this package was imported (ray_environment); the token
    # file is read at ray.init.
    os.environ.pop("RAY_ADDRESS", None)
    head = read_head(settings)
    if head is not None and head.address == address and head.token_path:
        os.environ.setdefault("RAY_AUTH_TOKEN_PATH", head.token_path)
    if ray.is_initialized():
        return
    ray.init(
        address=address,
        namespace=settings.ray_namespace,
        runtime_env={"env_vars": settings.env()},
        log_to_driver=False,
        logging_level=logging.ERROR,
        # Structured logs: every actor and task of the job writes JSON lines (with the logger
        # name, e.g. wonder.conversation) to its Ray log files, readable in the dashboard.
        logging_config=ray.LoggingConfig(
            encoding="JSON", log_level="INFO", additional_log_standard_attrs=["name"]
        ),
    )
    # The config also applies to this (CLI) process: keep its terminal to what `say` prints.
    logging.getLogger().setLevel(logging.WARNING)


def disconnect() -> None:
    """Detach this process from Ray, if it is attached."""
    if ray.is_initialized():
        ray.shutdown()
