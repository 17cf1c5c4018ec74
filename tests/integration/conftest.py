"""Integration fixtures beyond the session Ray of tests/conftest.py (keep this file additive).

``s3_server``: a real S3-compatible server (moto's, on loopback) for the whole session; ``s3_uri``:
a fresh bucket on it per test. Credentials are moto's dummies, set in this process's environment
(LanceDB and s3fs read the usual ``AWS_*`` variables) and returned for Ray runtime environments.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cluster.local_services import S3Server, start_s3

__all__ = ["S3Server"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """``moto_server -H 127.0.0.1 -p PORT`` (``cluster.local_services``), stopped by its PID at the
    end of the session."""
    server = start_s3()
    try:
        yield server
    finally:
        server.stop()


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
