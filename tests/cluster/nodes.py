"""Several Ray nodes on this machine: ``cluster.local_cluster`` (shared with
``benchmarks/cluster_scale.py``), re-exported for the tests of this tier."""

from __future__ import annotations

from cluster.local_cluster import NODE_START_TIMEOUT_S, LocalCluster, Node

__all__ = ["NODE_START_TIMEOUT_S", "LocalCluster", "Node"]
