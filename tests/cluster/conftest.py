"""The cluster tier: a head and three worker raylets on this machine, sharing PostgreSQL and S3.

``multinode`` starts, once for the tier, Ray nodes as separate ``ray start`` processes
(``cluster/local_cluster.py``): the head (the GCS, the dashboard, Serve's controller and proxy,
Wonder's singletons), two CPU workers (node group ``cpu``) and one worker that advertises the
accelerator resource (node group ``accelerator``; nothing runs a model there in these tests).
Every node has one CPU and detects a lost peer in about 1.5 s (``bootstrap.NODE_HEALTH_CHECK_ENV``).
All of them share one PostgreSQL database (the tier's own server, which
``test_database_loss.py`` stops and starts again) and one bucket on moto's S3 server, as the
nodes of a real cluster share their stores; the head's GCS
keeps its tables in the session's Redis (GCS fault tolerance), so the head can be killed and
started again (``test_head_restart.py``, which therefore runs last in the tier).

The test process never becomes this cluster's driver (it may already be the driver of the
session's local Ray of the other tiers): ``drive()`` runs driver work in a subprocess, and the
tests read placement from the dashboard's state API and data from the shared store.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cluster.local_services import PostgresServer, RedisServer, start_postgres
from cluster.placement import accelerator_node_labels, cpu_node_labels
from core.settings import Settings, settings_from_env
from core.store import Store, open_store
from tests.cluster.nodes import LocalCluster, Node
from tests.conftest import free_port
from tests.integration.conftest import S3Server
from tests.integration.conftest import s3_server as s3_server

ACCELERATOR_RESOURCE = "wonder_accelerator"
DRIVER_TIMEOUT_S = 420
LAST = "test_head_restart.py"  # restarts the head under everything else: runs last in the tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    last = [i for i in items if i.path.name == LAST and i.path.parent == here]
    if not last:
        return
    rest = [i for i in items if i.path.name != LAST or i.path.parent != here]
    tier = [n for n, i in enumerate(rest) if i.path.parent == here]
    at = tier[-1] + 1 if tier else len(rest)
    items[:] = rest[:at] + last + rest[at:]


@dataclass
class MultiNode:
    """The running cluster, its settings (as env) and its nodes by role."""

    nodes: LocalCluster
    database: PostgresServer
    env: dict[str, str]  # WONDER_* settings
    process_env: dict[str, str]  # what Ray processes and drivers of this cluster run with

    @property
    def settings(self) -> Settings:
        return settings_from_env(self.env)

    @property
    def store(self) -> Store:
        return open_store(self.env)

    @property
    def head(self) -> Node:
        return self.nodes.nodes["head"]

    @property
    def cpu(self) -> list[Node]:
        """The CPU workers still running (a test's victim, once killed, is not one)."""
        return [
            n
            for name, n in self.nodes.nodes.items()
            if name.startswith("cpu") and n.process.poll() is None
        ]

    @property
    def accelerator(self) -> Node:
        return self.nodes.nodes["accelerator"]

    @property
    def gateway_url(self) -> str:
        """Serve's one proxy (on the head), once ``drive("serve", ...)`` has deployed."""
        return f"http://127.0.0.1:{self.settings.gateway_port}"

    def drive(self, scenario: str, **args: Any) -> dict[str, Any]:
        """Run ``tests.cluster.driver SCENARIO`` against this cluster; its JSON result."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.cluster.driver", scenario, json.dumps(args)],
            env={**self.process_env, "RAY_ADDRESS": self.nodes.address},
            capture_output=True,
            text=True,
            timeout=DRIVER_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise AssertionError(f"driver {scenario} failed:\n{done.stderr[-4000:]}")
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def actor_nodes(multinode: MultiNode, names: list[str]) -> dict[str, str]:
    """name -> node id of the live actors called ``names``."""
    from ray.util.state import list_actors

    found = list_actors(
        address=multinode.nodes.dashboard_url,
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return {a.name: a.node_id for a in found if a.name in names}


def gateway_replica_nodes(multinode: MultiNode) -> list[str]:
    """The nodes of the gateway's live Serve replicas."""
    from ray.util.state import list_actors

    found = list_actors(
        address=multinode.nodes.dashboard_url,
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return [a.node_id for a in found if (a.class_name or "").startswith("ServeReplica:gateway")]


@pytest.fixture(scope="package")
def cluster_database() -> Iterator[PostgresServer]:
    """The tier's own PostgreSQL server (not the session's: one test stops it)."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def multinode(
    cluster_database: PostgresServer, s3_server: S3Server, redis_server: RedisServer
) -> Iterator[MultiNode]:
    bucket = s3_server.make_bucket()
    data_dir = Path(tempfile.mkdtemp(prefix="wonder-cluster-"))
    temp_dir = tempfile.mkdtemp(prefix="wc", dir="/tmp")  # unix socket paths stay short
    env = {
        "WONDER_DATA_DIR": str(data_dir),
        "WONDER_DATABASE_URL": cluster_database.create_database(),
        "WONDER_OBJECT_URI": f"s3://{bucket}/objects",
        "WONDER_LANCE_URI": f"s3://{bucket}/lance",
        "WONDER_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "WONDER_ACCELERATOR_RESOURCE": ACCELERATOR_RESOURCE,
        "WONDER_CONVERSATION_IDLE_TTL_S": "600",
        "WONDER_MAX_RESIDENT_CONVERSATIONS": "64",
        "WONDER_ALLOW_TEST_DOUBLES": "true",
        "WONDER_LIBRARY_CALLABLES": '["tests.callables"]',
        # One Serve proxy, on the head: the nodes share 127.0.0.1, where one port takes one
        # proxy (a cluster runs EveryNode behind a load balancer, docs/deploy.md).
        "WONDER_SERVE_PROXY_LOCATION": "HeadOnly",
        "WONDER_GATEWAY_PORT": str(free_port()),
    }
    process_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WONDER_", "RAY_ADDRESS"))},
        **s3_server.env,
        **env,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray records "the current cluster" under $RAY_TMPDIR: keep ours out of /tmp/ray.
        "RAY_TMPDIR": temp_dir,
        # The head's one proxy stands for a cluster's load balancer: it spreads connections over
        # the gateway replicas of every node instead of preferring the head's own.
        "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
    }
    nodes = LocalCluster(
        temp_dir,
        process_env,
        redis_address=redis_server.address,
        redis_namespace=f"wonder-{uuid.uuid4().hex[:8]}",
    )
    try:
        nodes.start_head()
        nodes.add_worker("cpu-1", cpu_node_labels())
        nodes.add_worker("cpu-2", cpu_node_labels())
        nodes.add_worker(
            "accelerator", accelerator_node_labels(), resources={ACCELERATOR_RESOURCE: 1}
        )
        started = ", ".join(f"{n.name} {n.started_in_s:.1f}s" for n in nodes.nodes.values())
        print(f"\nmulti-node cluster up ({started})")
        yield MultiNode(nodes=nodes, database=cluster_database, env=env, process_env=process_env)
    finally:
        nodes.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        time.sleep(0.5)
        shutil.rmtree(temp_dir, ignore_errors=True)
