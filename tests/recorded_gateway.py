"""An in-process cluster whose model calls are recorded, and the real gateway app over it.

For tests that read recorded calls, traces and bundles through the gateway's routes without Ray:
``recording_cluster`` installs the production background writer (``core.record_sink``) over the
cluster's store; ``gateway_client`` answers with the real app (FastAPI's TestClient) as one
client's key sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from core.ports import ChatModels, PromptTokenizers
from core.recording_setup import install_recording, uninstall_recording
from core.settings import settings_from_env
from serving.gateway.app import create_api
from serving.gateway.context import GatewayContext
from tests.inprocess import InProcessCluster


@contextmanager
def recording_cluster(data_dir: Path) -> Iterator[InProcessCluster]:
    """An ``InProcessCluster`` in ``data_dir`` recording its model calls (scripted models,
    the local embedder), closed after."""
    env = {"WONDER_DATA_DIR": str(data_dir), "WONDER_EMBEDDER": "local"}
    cluster = InProcessCluster(env)
    install_recording(cluster.store, settings_from_env(env), "test")
    try:
        yield cluster
    finally:
        uninstall_recording()
        cluster.close()


def gateway_client(
    cluster: InProcessCluster,
    key: str,
    chat_models: ChatModels | None = None,
    tokenizers: PromptTokenizers | None = None,
) -> TestClient:
    """The gateway app over ``cluster``, sending ``key``; ``chat_models``: what a replayed call
    is sent to (none: replays are refused); ``tokenizers``: what counts a local model's call."""
    context = GatewayContext(
        store=cluster.store,
        conversations=cluster,
        workflows=cluster.workflows,
        memory=cluster.memory,
        settings_env=cluster.settings_env,
        chat_models=chat_models,
        tokenizers=tokenizers,
    )
    client = TestClient(create_api(context), raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {key}"
    return client
