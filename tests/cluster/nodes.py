"""Several Ray nodes on this machine: ``ray start --block`` subprocesses, one per node.

Each node is a ``ray start`` (head or ``--address`` worker) run in its own session, so its
process group holds its raylet, agents and every worker the raylet forks: ``kill()`` sends that
group SIGKILL, which is what losing a machine looks like to Ray. Nodes get free ports for
everything Ray would otherwise take at a fixed default (GCS, dashboard, agent, metrics, client
server) and random worker ports, so another Ray on the machine is never disturbed. Nodes are
started one after another, each waited for until the head's GCS lists it alive (startup on a
loaded 2-core machine takes seconds to tens of seconds; the wait is generous and measured).

The test process itself never connects to this cluster (``pytest tests`` has its own
session-wide local Ray in it): work that needs a driver runs in a subprocess
(``tests.cluster.driver``), and the tests read the cluster's state over HTTP (dashboard state
API, Serve's proxy, the nodes' metrics endpoints) and the shared PostgreSQL store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import free_port

NODE_START_TIMEOUT_S = 180.0
RAY = str(Path(sys.executable).with_name("ray"))


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    node_id: str = ""
    started_in_s: float = 0.0

    def kill(self) -> None:
        """SIGKILL the node's whole process group: raylet, agents and workers."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


@dataclass
class LocalCluster:
    temp_dir: str
    env: dict[str, str]
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, args: list[str]) -> Node:
        metrics_port = free_port()
        log = Path(self.temp_dir, f"{name}.log")
        command = [
            RAY,
            "start",
            "--block",
            "--disable-usage-stats",
            f"--metrics-export-port={metrics_port}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--min-worker-port=0",
            "--max-worker-port=0",
            f"--object-store-memory={100 * 1024 * 1024}",
            *args,
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        node = Node(name, process, log, metrics_port)
        self.nodes[name] = node
        return node

    def start_head(self, num_cpus: int = 1) -> Node:
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        started = time.monotonic()
        head = self._start(
            "head",
            [
                "--head",
                "--node-ip-address=127.0.0.1",
                f"--port={self.gcs_port}",
                f"--ray-client-server-port={free_port()}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
                f"--temp-dir={self.temp_dir}",
                f"--num-cpus={num_cpus}",
                "--labels=wonder.io/node-group=head",
            ],
        )
        self._wait_registered(head, started)
        return head

    def add_worker(
        self,
        name: str,
        labels: dict[str, str],
        resources: dict[str, float] | None = None,
        num_cpus: int = 1,
    ) -> Node:
        started = time.monotonic()
        args = [
            f"--address={self.address}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}",
            "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
        ]
        if resources:
            args.append(f"--resources={json.dumps(resources)}")
        node = self._start(name, args)
        self._wait_registered(node, started)
        return node

    def alive_nodes(self) -> list[Any]:
        from ray.util.state import list_nodes

        try:
            found = list_nodes(
                address=self.dashboard_url,
                filters=[("state", "=", "ALIVE")],
                raise_on_missing_output=False,
                timeout=30,
            )
        except Exception:  # the dashboard is still starting
            return []
        return list(found)

    def _wait_registered(self, node: Node, started: float) -> None:
        known = {n.node_id for n in self.nodes.values() if n.node_id}
        deadline = started + NODE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if node.process.poll() is not None:
                raise RuntimeError(f"node {node.name} exited: {node.log.read_text()[-3000:]}")
            fresh = [n for n in self.alive_nodes() if n.node_id not in known]
            if fresh:
                node.node_id = fresh[0].node_id
                node.started_in_s = time.monotonic() - started
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"node {node.name} did not register within {NODE_START_TIMEOUT_S}s: "
            f"{node.log.read_text()[-3000:]}"
        )

    def wait_dead(self, node: Node, timeout: float = 120.0) -> None:
        """Until the GCS no longer lists ``node`` alive (its health checks failed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.node_id not in {n.node_id for n in self.alive_nodes()}:
                return
            time.sleep(0.5)
        raise RuntimeError(f"node {node.name} still listed alive after {timeout}s")

    def shutdown(self) -> None:
        """Workers first, then the head: SIGTERM (``ray start --block`` stops its node), then
        SIGKILL for whatever is left of each process group."""
        order = [n for n in self.nodes.values() if n.name != "head"]
        order += [n for n in self.nodes.values() if n.name == "head"]
        for node in order:
            if node.process.poll() is None:
                try:
                    os.killpg(node.process.pid, signal.SIGTERM)
                    node.process.wait(timeout=20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(node.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
