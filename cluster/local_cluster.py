"""Several Ray nodes on one machine: ``ray start --block`` subprocesses, one per node.

Used by the multi-node test tier (``tests/cluster/``) and ``benchmarks/cluster_scale.py``. Each
node is a ``ray start`` (head or ``--address`` worker) run in its own session, so its process
group holds its raylet, agents and every worker the raylet forks: ``Node.kill()`` sends that
group SIGKILL, which is what losing a machine looks like to Ray. Nodes get free ports for
everything Ray would otherwise take at a fixed default (GCS, dashboard, agent, metrics, client
server) and random worker ports, so another Ray on the machine is never disturbed. Nodes are
started one after another, each waited for until the head's GCS lists it alive.

Every node runs with ``bootstrap.NODE_HEALTH_CHECK_ENV`` (a lost node is declared dead in about
1.5 seconds, as ``wonder up`` and the deployment files do). With ``redis_address`` the head's
GCS keeps its tables in that Redis (Ray's GCS fault tolerance): ``restart_head()`` then brings a
killed head back on the same ports, and the workers' raylets and their detached actors carry on.

The process that starts the nodes never needs to be their driver: a pytest session has its own
local Ray in it, so tests drive this cluster from subprocesses and read it over HTTP (dashboard
state API, Serve's proxy, the nodes' metrics endpoints).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.bootstrap import NODE_HEALTH_CHECK_ENV, free_port

NODE_START_TIMEOUT_S = 180.0
# With GCS fault tolerance, how long raylets and workers wait for a lost GCS to come back before
# they exit (Ray's default 60 s; KubeRay raises it on workers the same way).
START_ATTEMPTS = 5
GCS_RECONNECT_ENV = {"RAY_gcs_rpc_server_reconnect_timeout_s": "120"}
RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 100 * 1024 * 1024


class NodeExited(RuntimeError):
    """``ray start`` exited before its node registered."""


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    node_id: str = ""
    started_in_s: float = 0.0

    def kill(self) -> None:
        """SIGKILL every process of the node at once, as if its machine died: the process group
        of ``ray start`` (raylet, GCS, agents) and every descendant, Ray's workers included
        (each runs in its own process group, and would otherwise go on serving calls until it
        noticed its raylet gone). The group is stopped first, so that nothing forks meanwhile."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGSTOP)
        tree = _descendants(self.process.pid)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    @property
    def metrics_url(self) -> str:
        """The node's Prometheus endpoint (Ray's ``--metrics-export-port``)."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


@dataclass
class LocalCluster:
    """A head and worker nodes on 127.0.0.1, each its own ``ray start --block`` process group.

    ``env`` is the environment every node runs with; ``redis_address`` (``host:port``) turns on
    GCS fault tolerance for the head, under ``redis_namespace``.
    """

    temp_dir: str
    env: dict[str, str]
    redis_address: str | None = None
    redis_namespace: str = "wonder"
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: dict[str, Node] = field(default_factory=dict)
    _head_args: list[str] = field(default_factory=list)
    _gone: set[str] = field(default_factory=set)  # ids of heads replaced by restart_head()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> Node:
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
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            *args,
        ]
        with log.open("ab") as out:
            process = subprocess.Popen(
                command,
                env={**NODE_HEALTH_CHECK_ENV, **self.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        node = Node(name, process, log, metrics_port)
        self.nodes[name] = node
        return node

    def _head_env(self) -> dict[str, str]:
        if self.redis_address is None:
            return {}
        return {
            "RAY_REDIS_ADDRESS": self.redis_address,
            "RAY_external_storage_namespace": self.redis_namespace,
        }

    def _worker_env(self) -> dict[str, str]:
        return GCS_RECONNECT_ENV if self.redis_address is not None else {}

    def start_head(self, num_cpus: int = 1, labels: dict[str, str] | None = None) -> Node:
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        self._head_args = [
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            f"--ray-client-server-port={free_port()}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--temp-dir={self.temp_dir}",
            f"--num-cpus={num_cpus}",
            "--labels=" + _labels(labels or {"wonder.io/node-group": "head"}),
        ]
        return self._start_head()

    def _start_head(self) -> Node:
        return self._launch("head", self._head_args, {**self._worker_env(), **self._head_env()})

    def restart_head(self) -> Node:
        """Start the head again on the same ports (after ``nodes["head"].kill()``). With GCS
        fault tolerance the new GCS reads the cluster's tables back from Redis."""
        old = self.nodes.pop("head")
        self._gone.add(old.node_id)
        if old.process.poll() is None:
            old.kill()
        # `ray start --head` refuses an address that the last head recorded and that a raylet on
        # this machine still names (the workers' raylets here, waiting for their GCS): on one
        # machine, forget the record (a real head machine has no other raylets).
        Path(self.temp_dir, "ray_current_cluster").unlink(missing_ok=True)
        return self._start_head()

    def add_worker(
        self,
        name: str,
        labels: dict[str, str],
        resources: dict[str, float] | None = None,
        num_cpus: int = 1,
    ) -> Node:
        args = [
            f"--address={self.address}",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}",
            "--labels=" + _labels(labels),
        ]
        if resources:
            args.append(f"--resources={json.dumps(resources)}")
        return self._launch(name, args, self._worker_env())

    def _launch(self, name: str, args: list[str], env: dict[str, str]) -> Node:
        """Start a node and wait until the GCS lists it. ``ray start`` gives its raylet 30 s to
        register and exits otherwise, which a loaded 2-core machine can exceed: then the node
        is started again (``START_ATTEMPTS`` in all), on the same ports."""
        for attempt in range(1, START_ATTEMPTS + 1):
            started = time.monotonic()
            node = self._start(name, args, env)
            try:
                self._wait_registered(node, started)
                return node
            except NodeExited:
                node.kill()
                if attempt == START_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def alive_nodes(self) -> list[Any]:
        """The nodes the GCS lists alive (empty while the dashboard cannot answer)."""
        from ray.util.state import list_nodes

        try:
            found = list_nodes(
                address=self.dashboard_url,
                filters=[("state", "=", "ALIVE")],
                raise_on_missing_output=False,
                timeout=30,
            )
        except Exception:  # the dashboard is starting, or its head is being restarted
            return []
        return list(found)

    def _wait_registered(self, node: Node, started: float) -> None:
        known = {n.node_id for n in self.nodes.values() if n.node_id} | self._gone
        deadline = started + NODE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if node.process.poll() is not None:
                raise NodeExited(f"node {node.name} exited: {node.log.read_text()[-3000:]}")
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

    def wait_dead(self, node: Node, timeout: float = 120.0) -> float:
        """Until the GCS no longer lists ``node`` alive (its health checks failed); the
        seconds waited."""
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            alive = self.alive_nodes()
            if alive and node.node_id not in {n.node_id for n in alive}:
                return time.monotonic() - started
            time.sleep(0.25)
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


def _descendants(root: int) -> list[int]:
    """Every live descendant of process ``root`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())
