"""Re-running a finished run from one of its nodes. Pure: records in, a plan out.

A re-run is a new run of the same workflow version with the same input. The planner walks the
graph as for any run, but a token on a node that the chosen node cannot reach (everything
upstream of it, and side branches it does not feed) is not dispatched: it completes at once with
the output the original run recorded for the same visit, and is marked reused. The chosen node
and everything it reaches run for real. Since reused outputs are the recorded ones and planning is
deterministic, the re-run takes the original's path up to the chosen node.

A visit is matched by its node, its fan-out position (the branch indices, outermost first) and
how many visits of that node at that position came before it (a loop visits a node again). A
visit the original did not complete (failed, cancelled) runs for real.

Refused: a node the workflow does not have (``NotFound``); a node the run never reached, or one
with an upstream visit that did not complete (failed, cancelled), so its output was not recorded
(``Conflict``: there is nothing to reuse).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import Conflict, NotFound
from core.jsontypes import JsonObject
from core.workflows import NodeRecord, WorkflowDef

VisitKey = tuple[str, tuple[int, ...], int]  # node id, branch indices, earlier visits there


@dataclass(frozen=True, slots=True)
class Reused:
    """The original run's recorded visit a re-run takes instead of running the node."""

    token_id: str
    input: Any
    output: Any


@dataclass(frozen=True, slots=True)
class RerunPlan:
    """What planning needs to run a re-run: the node it starts again from, that node's input
    override, and the recorded visits it reuses."""

    from_node: str
    node_input: JsonObject | None = None
    reuse: Mapping[VisitKey, Reused] = field(default_factory=dict)


def reachable(edges: Iterable[tuple[str, str]], node_id: str) -> set[str]:
    """``node_id`` and every node an edge path leads to from it."""
    outgoing: dict[str, list[str]] = {}
    for source, to in edges:
        outgoing.setdefault(source, []).append(to)
    seen = {node_id}
    frontier = [node_id]
    while frontier:
        for to in outgoing.get(frontier.pop(), []):
            if to not in seen:
                seen.add(to)
                frontier.append(to)
    return seen


def upstream(edges: Iterable[tuple[str, str]], node_id: str) -> set[str]:
    """Every other node with an edge path to ``node_id``."""
    reversed_edges = [(to, source) for source, to in edges]
    return reachable(reversed_edges, node_id) - {node_id}


def visit_keys(visits: Sequence[tuple[str, tuple[int, ...]]]) -> list[VisitKey]:
    """The key of each visit (node id, branch indices), given in creation order."""
    seen: Counter[tuple[str, tuple[int, ...]]] = Counter()
    keys: list[VisitKey] = []
    for node_id, branch in visits:
        keys.append((node_id, branch, seen[(node_id, branch)]))
        seen[(node_id, branch)] += 1
    return keys


def rerun_plan(
    workflow: WorkflowDef,
    run_id: str,
    records: Sequence[NodeRecord],
    from_node: str,
    node_input: JsonObject | None = None,
) -> RerunPlan:
    """The plan of a re-run of ``run_id`` (its node history ``records``) from ``from_node``."""
    if from_node not in {n.id for n in workflow.nodes}:
        raise NotFound(f"node {from_node} not found in workflow {workflow.id}")
    ordered = sorted(records, key=lambda r: r.seq)
    if from_node not in {r.node_id for r in ordered}:
        raise Conflict(
            f"run {run_id} never reached node {from_node}, so it did not record the outputs of "
            f"the nodes upstream of it: re-run it from a node it reached"
        )
    edges = [(e.source, e.to) for e in workflow.edges]
    rerun = reachable(edges, from_node)
    before = upstream(edges, from_node) - rerun
    unfinished = sorted({r.node_id for r in ordered if r.node_id in before and r.state != "done"})
    if unfinished:
        raise Conflict(
            f"run {run_id} recorded no output for {', '.join(unfinished)} (upstream of "
            f"{from_node}: it did not complete there), so it cannot be re-run from {from_node}"
        )
    keys = visit_keys([(r.node_id, tuple(i for _g, i in r.branch)) for r in ordered])
    reuse = {
        key: Reused(record.token_id, record.input, record.output)
        for key, record in zip(keys, ordered, strict=True)
        if record.state == "done" and record.node_id not in rerun
    }
    return RerunPlan(from_node, node_input, reuse)
