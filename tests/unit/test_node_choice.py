"""``NodeChoice``: where the directory puts each new conversation actor (cluster/conversations.py).

Ray places zero-resource actors at random whatever their strategy (``cluster/placement.py``), so
the directory chooses: the eligible node holding the fewest of the actors it holds now.
"""

from __future__ import annotations

from cluster.conversations import NODES_SEEN_S, NodeChoice
from cluster.placement import NodeView
from core.settings import Settings

HEAD = NodeView("head", {"CPU": 2, "node:__internal_head__": 1}, {})
GPU = NodeView("gpu", {"CPU": 2, "wonder_accelerator": 1}, {"wonder.io/node-group": "accelerator"})


def worker(name: str) -> NodeView:
    return NodeView(name, {"CPU": 2}, {"wonder.io/node-group": "cpu"})


def test_new_actors_even_out_over_the_workers() -> None:
    choice = NodeChoice(Settings(), lambda: [HEAD, GPU, worker("w1"), worker("w2")])
    held: set[str] = set()
    for n in range(6):
        node = choice.choose(f"c{n}", held)
        held.add(f"c{n}")
        assert node in ("w1", "w2")
    assert choice.held_per_node() == {"w1": 3, "w2": 3}


def test_only_what_the_directory_still_holds_counts() -> None:
    choice = NodeChoice(Settings(), lambda: [worker("w1"), worker("w2")])
    assert choice.choose("a", set()) == "w1"
    assert choice.choose("b", {"a"}) == "w2"
    assert choice.choose("c", {"a", "b"}) == "w1"
    # a and c were evicted: w1 holds nothing now, w2 holds b.
    assert choice.choose("d", {"b"}) == "w1"
    assert choice.held_per_node() == {"w1": 1, "w2": 1}


def test_without_a_worker_the_head_takes_them_and_without_nodes_ray_chooses() -> None:
    assert NodeChoice(Settings(), lambda: [HEAD, GPU]).choose("a", set()) == "head"
    assert NodeChoice(Settings(), lambda: [GPU]).choose("a", set()) is None


def test_the_nodes_are_read_again_after_a_while() -> None:
    nodes = [worker("w1")]
    reads: list[int] = []

    def live() -> list[NodeView]:
        reads.append(1)
        return list(nodes)

    now = [0.0]
    choice = NodeChoice(Settings(), live, clock=lambda: now[0])
    assert choice.choose("a", set()) == "w1"
    nodes.append(worker("w0"))
    now[0] = NODES_SEEN_S - 0.1
    assert choice.choose("b", {"a"}) == "w1"  # the view is at most NODES_SEEN_S old
    assert len(reads) == 1
    now[0] = NODES_SEEN_S
    assert choice.choose("c", {"a", "b"}) == "w0"
    assert len(reads) == 2
