"""Metrics: after turns, each node's Prometheus endpoint (``--metrics-export-port``) exports
Wonder's series with their labels, and ``deploy/grafana-dashboard.json`` reads series that
really appear.

Where a series appears: Ray exports a metric from the node whose process recorded it (each node's
metrics agent serves its own workers), every ``metrics_report_interval_ms`` (10 s by default), with
the ``ray_`` prefix and Prometheus' ``_total``/``_bucket`` suffixes. Turn series come from the
conversation actor's node, the directory's from the head.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from cluster.local_cluster import Node
from cluster.naming import DIRECTORY_NAME, conversation_actor_name
from tests.cluster.conftest import MultiNode, actor_nodes
from tests.conftest import wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile

ROOT = Path(__file__).resolve().parents[2]
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(node: Node) -> Samples:
    """``ray_wonder_*`` samples on the node's endpoint: name → [(labels, value)]."""
    text = httpx.get(node.metrics_url, timeout=10).text
    found: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ray_wonder_"):
                found[sample.name].append((dict(sample.labels), sample.value))
    return found


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        value
        for got, value in samples.get(name, [])
        if all(got.get(k) == v for k, v in labels.items())
    )


TURN_SERIES = {
    "ray_wonder_turns_started_total": {},
    "ray_wonder_turns_ended_total": {"outcome": "completed", "reason": "none"},
    "ray_wonder_turn_latency_seconds_count": {"outcome": "completed"},
    "ray_wonder_first_token_latency_seconds_count": {},
    "ray_wonder_tokens_streamed_total": {},
}
HEAD_SERIES = {
    "ray_wonder_conversation_activations_total": {},
    "ray_wonder_resident_conversations": {},
}


def test_turn_series_appear_on_the_conversations_node(multinode: MultiNode) -> None:
    store = multinode.store
    client_id, _ = make_client(store)
    agent = make_agent(
        store, client_id, scripted_profile(store, [{"reply": "four words of reply"}])
    )
    convs = [make_conversation(store, client_id, agent).id for _ in range(2)]
    # The tier's nodes outlive this test: earlier tests' turns are already in their series.
    # Count from here, node by node.
    nodes = list(multinode.nodes.nodes.values())
    before = {node.node_id: scrape(node) for node in nodes}
    assert multinode.drive("converse", conversations=convs, text="hi")["statuses"] == [
        "completed",
        "completed",
    ]
    names = [conversation_actor_name(c) for c in convs]
    where = wait_for(lambda: len(found := actor_nodes(multinode, names)) == 2 and found)
    by_id = {n.node_id: n for n in nodes}
    turns_on = Counter(where.values())
    turn_nodes = [by_id[node_id] for node_id in turns_on]

    def added(node: Node, now: Samples, name: str, labels: dict[str, str]) -> float:
        return total(now, name, **labels) - total(before[node.node_id], name, **labels)

    def turn_series() -> list[Samples] | None:
        # Each conversation actor is its own process, exporting on its own schedule: wait for
        # each node's own turns, whole.
        scraped = [scrape(node) for node in turn_nodes]
        for node, now in zip(turn_nodes, scraped, strict=True):
            turns = turns_on[node.node_id]
            if any(added(node, now, n, labels) < turns for n, labels in TURN_SERIES.items()):
                return None
            if added(node, now, "ray_wonder_tokens_streamed_total", {}) < 4 * turns:
                return None
        return scraped

    # One export interval (10 s) after the turns, and a margin for a loaded machine.
    scraped = wait_for(turn_series, timeout=90, interval=2.0)
    for samples in scraped:
        buckets = samples["ray_wonder_turn_latency_seconds_bucket"]
        assert {labels["le"] for labels, _ in buckets} >= {"0.1", "1.0", "+Inf"}
        for labels, _ in samples["ray_wonder_turns_started_total"]:
            # Ray's own labels say where the series came from.
            assert labels["Component"] == "core_worker" and labels["SessionName"]

    head = multinode.head
    assert actor_nodes(multinode, [DIRECTORY_NAME])[DIRECTORY_NAME] == head.node_id
    head_samples = wait_for(
        lambda: (
            (s := scrape(head))
            and all(name in s for name in HEAD_SERIES)
            and added(head, s, "ray_wonder_conversation_activations_total", {}) >= 2
            and s
        ),
        timeout=90,
        interval=2.0,
    )
    assert total(head_samples, "ray_wonder_resident_conversations") >= 2

    # The dashboard reads series that appeared here (under the names Prometheus gives them).
    seen = {
        re.sub(r"_(total|bucket|sum|count)$", "", n) for s in [*scraped, head_samples] for n in s
    }
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    read = {
        re.sub(r"_(total|bucket|sum|count)$", "", n)
        for n in re.findall(r"ray_wonder_[a-z_]+", exprs)
    }
    assert seen <= read, f"exported but not on the dashboard: {sorted(seen - read)}"
    assert {
        "ray_wonder_turns_started",
        "ray_wonder_turns_ended",
        "ray_wonder_turn_latency_seconds",
        "ray_wonder_first_token_latency_seconds",
        "ray_wonder_tokens_streamed",
        "ray_wonder_resident_conversations",
        "ray_wonder_conversation_activations",
    } <= seen & read
