"""A real PostgreSQL server for tests: Debian's binaries, a temp data dir, 127.0.0.1, a free port.

``start_postgres()`` runs ``initdb`` and ``pg_ctl start`` (as the ``postgres`` user when the tests
run as root: the server refuses to run as root); ``PostgresServer.create_database()`` makes a fresh
database per test; ``stop()`` runs ``pg_ctl stop -m immediate`` and removes the data dir. The
binaries come from the ``postgresql`` package that ``make install`` installs when missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port


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


def _as_user() -> str | None:
    """The user the server runs as: ``postgres`` when we are root, else ourselves."""
    return "postgres" if os.geteuid() == 0 else None


@dataclass
class PostgresServer:
    port: int
    data_dir: Path
    bin_dir: Path
    user: str | None
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

    def stop(self) -> None:
        subprocess.run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"],
            user=self.user,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def start_postgres(max_connections: int = 200) -> PostgresServer:
    """initdb + pg_ctl start on 127.0.0.1 and a free port; trust auth for the role ``wonder``."""
    bin_dir = postgres_bin_dir()
    user = _as_user()
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
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
        f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=off "
        "-c full_page_writes=off"
    )
    subprocess.run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data_dir),
            "-o",
            options,
            "-l",
            str(root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
        user=user,
        check=True,
        capture_output=True,
    )
    return PostgresServer(port=port, data_dir=data_dir, bin_dir=bin_dir, user=user)
