"""Integration fixtures beyond the session Ray of tests/conftest.py (keep this file additive).

``s3_server``: a real S3-compatible server (moto's, on loopback) for the whole session; ``s3_uri``:
a fresh bucket on it per test. Credentials are moto's dummies, set in this process's environment
(LanceDB and s3fs read the usual ``AWS_*`` variables) and returned for Ray runtime environments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    env: dict[str, str]  # AWS_* variables a process needs to reach it


def _moto_server_binary() -> str:
    candidate = Path(sys.executable).with_name("moto_server")
    return str(candidate) if candidate.exists() else shutil.which("moto_server") or "moto_server"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """``moto_server -H 127.0.0.1 -p PORT``, stopped by its PID at the end of the session."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [_moto_server_binary(), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key, value in env.items():
        os.environ.setdefault(key, value)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(endpoint, timeout=1.0)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)
        yield S3Server(endpoint_url=endpoint, env={k: os.environ[k] for k in env})
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def s3_uri(s3_server: S3Server) -> str:
    """A new, empty bucket for one test: ``s3://<bucket>``."""
    import s3fs

    bucket = f"wonder-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_server.endpoint_url)
    fs.mkdir(bucket)
    return f"s3://{bucket}"


@pytest.fixture(scope="session")
def embedder_app(serve_port: int) -> str:
    """The Embedder Serve application, deployed once and left up for the session (executor
    workers are reused across tests and keep their handle)."""
    from serving.embedder import EMBEDDER_APP
    from serving.embedder_app import deploy_embedder

    deploy_embedder()
    return EMBEDDER_APP
