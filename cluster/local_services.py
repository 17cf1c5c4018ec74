"""Servers a one-machine cluster shares, each on 127.0.0.1 in its own temp dir, stopped by PID.

PostgreSQL (Debian's binaries: ``initdb``/``pg_ctl``), moto's S3-compatible server and Redis
(``redis-server``, for the GCS fault tolerance of the multi-node tier). The test fixtures
(``tests/conftest.py``, ``tests/integration/conftest.py``) and ``benchmarks/cluster_scale.py``
start them through here; ``make install`` installs the Debian packages (``system-packages``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cluster.bootstrap import free_port

SERVER_START_TIMEOUT_S = 20.0

# ------------------------------------------------------------------------------- PostgreSQL


def postgres_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb`` (Debian's layout)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if not found:
        raise RuntimeError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: "
            "run `make install` (it installs Debian's postgresql package)"
        )
    return Path(found[-1]).parent


def _server_user() -> str | None:
    """The user the server runs as: ``postgres`` when we are root, else ourselves."""
    return "postgres" if os.geteuid() == 0 else None


@dataclass
class PostgresServer:
    port: int
    data_dir: Path
    bin_dir: Path
    user: str | None
    options: str = ""
    databases: list[str] = field(default_factory=list)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://wonder@127.0.0.1:{self.port}/{database}"

    def _psql(self, sql: str) -> None:
        subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "wonder",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-q",
                "-c",
                sql,
            ],
            check=True,
            capture_output=True,
        )

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        name = f"w_{uuid.uuid4().hex[:12]}"
        self._psql(f"CREATE DATABASE {name}")
        self.databases.append(name)
        return self.url(name)

    def _pg_ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args],
            user=self.user,
            capture_output=True,
            check=check,
        )

    def start(self) -> None:
        """Start the server (again) on its port and data dir; returns once it accepts (at once
        when it runs already)."""
        running = subprocess.run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status"],
            user=self.user,
            capture_output=True,
        )
        if running.returncode == 0:
            return
        log = self.data_dir.parent / "server.log"
        self._pg_ctl("-o", self.options, "-l", str(log), "-w", "-t", "60", "start")

    def halt(self) -> None:
        """Stop the server at once (``-m immediate``: connections drop, like a crash); its data
        stays for ``start()``."""
        self._pg_ctl("-m", "immediate", "stop", check=False)

    def stop(self) -> None:
        """Stop the server and remove its data."""
        self.halt()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def start_postgres(max_connections: int = 200) -> PostgresServer:
    """initdb + pg_ctl start on 127.0.0.1 and a free port; trust auth for the role ``wonder``."""
    bin_dir = postgres_bin_dir()
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="wonder-pg-"))
    data_dir = root / "data"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            "wonder",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        ],
        user=user,
        check=True,
        capture_output=True,
    )
    port = free_port()
    # fsync and full-page writes guard against the machine crashing, which a test server never
    # outlives; a commit must still reach the WAL before it returns (synchronous_commit on), or
    # a server crash (the database-loss drill's ``pg_ctl -m immediate``) loses acknowledged rows.
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
        f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=on "
        "-c full_page_writes=off"
    )
    server = PostgresServer(port=port, data_dir=data_dir, bin_dir=bin_dir, user=user)
    server.options = options
    server.start()
    return server


# ------------------------------------------------------------------------------- S3 (moto)

# moto's server accepts any credentials; LanceDB and s3fs read the usual AWS_* variables.
MOTO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class S3Server:
    endpoint_url: str
    env: dict[str, str]  # AWS_* variables a process needs to reach it
    process: subprocess.Popen[bytes] | None = None

    def make_bucket(self) -> str:
        """A new, empty bucket: its name."""
        import s3fs

        bucket = f"wonder-{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(endpoint_url=self.endpoint_url).mkdir(bucket)
        return bucket

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)


def _beside_python(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else shutil.which(name) or name


def start_s3() -> S3Server:
    """``moto_server -H 127.0.0.1 -p PORT``; this process gets the dummy credentials (unless it
    has its own) and the server's ``env`` carries them to others."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [_beside_python("moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for key, value in MOTO_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        try:
            httpx.get(endpoint, timeout=1.0)
            break
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                _stop(process)
                raise RuntimeError("moto_server did not start") from None
            time.sleep(0.05)
    env = {k: os.environ[k] for k in MOTO_CREDENTIALS}
    return S3Server(endpoint_url=endpoint, env=env, process=process)


# ------------------------------------------------------------------------------- Redis


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        _stop(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if found is None:
        raise RuntimeError(
            "redis-server not found: run `make install` (it installs Debian's redis-server)"
        )
    return found


def start_redis() -> RedisServer:
    """``redis-server`` on 127.0.0.1 and a free port, its files in a temp dir (nothing saved to
    disk: the GCS's tables live as long as the server)."""
    directory = Path(tempfile.mkdtemp(prefix="wonder-redis-"))
    port = free_port()
    process = subprocess.Popen(
        [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(directory),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(directory / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port=port, directory=directory, process=process)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not _redis_answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"redis-server did not start (log in {directory})")
        time.sleep(0.05)
    return server


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
