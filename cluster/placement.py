"""Where each Wonder process runs on a multi-node Ray cluster: pure decisions from the settings.

Node groups (``ray-cluster.yaml`` and ``deploy/rayservice.yaml`` start nodes this way):

- **head**: the GCS, Serve's controller and HTTP proxy, and Wonder's two singletons, the
  conversation directory and the async-operations runner. They are pinned to the head
  (``node:__internal_head__``, the resource Ray gives the head node; Serve pins its controller
  the same way) because losing the head loses the GCS and with it every detached actor anyway:
  singletons there share the cluster's fate instead of adding a worker's. Both hold no state that
  the store lacks, so a restart re-reads it.
- **cpu** workers: conversation actors, workflow coordinators, executor tasks, gateway replicas
  and (by default) the embedder. Conversation actors and coordinators hold no resources
  (``num_cpus=0``: memory, not cores, bounds them), and Ray places such an actor on a *random*
  feasible node whatever its ``scheduling_strategy`` says (``SPREAD`` and soft affinities are
  ignored: ``ClusterResourceScheduler::GetBestSchedulableNode``, "the zero cpu actor is a special
  case"). So the conversation directory, which creates every conversation actor, chooses the node
  itself: the eligible node holding the fewest of its actors (``conversation_nodes``,
  ``least_held``), off the head while a worker can take them (losing the head loses its actors,
  and it carries the GCS, Serve and the singletons). The actor is pinned there by the node's
  ``ray.io/node-id`` label with a fallback selector, so that Ray still restarts it on another
  node when that one is lost. Coordinators are placed by Ray (at random, off accelerator nodes).
  Executor tasks use Ray's default (the caller's node while it has room), so a conversation's
  tools run beside it.
- **accelerator** workers carry the custom resource ``settings.accelerator_resource`` (one unit
  per vLLM replica) and the node label ``wonder.io/node-group=accelerator``. The vLLM deployment
  requires the resource; everything else requires the label *not* to be ``accelerator`` (Ray
  has no "avoid this resource" rule, labels have negation), unless
  ``WONDER_ACTORS_ON_ACCELERATOR_NODES`` says otherwise. A node with the resource but without
  the label would take CPU work: ``wonder up`` refuses such a cluster (``check_nodes``).

On one machine (``make up``) there is only the head: nothing requires the accelerator resource
unless ``llm_placement`` asks for it (``auto``: only with ``llm_device=cuda``), so everything runs
there, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.settings import Settings

HEAD_RESOURCE = "node:__internal_head__"
NODE_ID_LABEL = "ray.io/node-id"  # a label every Ray node carries
NODE_GROUP_LABEL = "wonder.io/node-group"
ACCELERATOR_GROUP = "accelerator"
CPU_GROUP = "cpu"
# A sliver of the head's own resource pins an actor there without using up anything.
PIN = 0.001

Options = dict[str, Any]


def _off_accelerators(settings: Settings) -> Options:
    if settings.actors_on_accelerator_nodes:
        return {}
    return {"label_selector": {NODE_GROUP_LABEL: f"!{ACCELERATOR_GROUP}"}}


def conversation_options(settings: Settings, node_id: str | None = None) -> Options:
    """A conversation actor: on ``node_id`` (the directory's choice) while that node lives, else
    anywhere off accelerator nodes (Ray's choice, at random; also where Ray restarts it when its
    node is lost)."""
    anywhere = _off_accelerators(settings)
    if node_id is None:
        return anywhere
    selector = anywhere.get("label_selector", {})
    return {
        "label_selector": {**selector, NODE_ID_LABEL: node_id},
        # A selector may not be empty: with nothing to avoid, one that every node satisfies.
        "fallback_strategy": [{"label_selector": selector or {NODE_ID_LABEL: "!none"}}],
    }


def conversation_nodes(settings: Settings, nodes: Iterable[NodeView]) -> list[str]:
    """The live nodes the directory places conversation actors on: off accelerator nodes (unless
    ``WONDER_ACTORS_ON_ACCELERATOR_NODES``), and off the head while another node qualifies."""
    allowed = [
        n
        for n in nodes
        if settings.actors_on_accelerator_nodes
        or n.labels.get(NODE_GROUP_LABEL) != ACCELERATOR_GROUP
    ]
    workers = [n for n in allowed if HEAD_RESOURCE not in n.resources]
    return sorted(n.node_id for n in workers or allowed)


def least_held(candidates: Sequence[str], held: Iterable[str]) -> str | None:
    """The candidate node holding the fewest actors (``held``: the node of each one held), the
    lowest id among equals; ``None`` without candidates."""
    counts = Counter(held)
    return min(candidates, key=lambda node: (counts[node], node), default=None)


def coordinator_options(settings: Settings) -> Options:
    """Workflow coordinators: anywhere off accelerator nodes (Ray picks one at random)."""
    return _off_accelerators(settings)


def executor_options(settings: Settings) -> Options:
    """Executor tasks: Ray's default (beside the caller), never on an accelerator node."""
    return _off_accelerators(settings)


def workspace_options(settings: Settings) -> Options:
    """A workspace actor with no worktree yet (or whose node is gone): off accelerator nodes.
    Once its worktree exists it is pinned to that node (``core.workspaces.placement``)."""
    return _off_accelerators(settings)


def singleton_options() -> Options:
    """The directory and the async-operations runner: on the head node."""
    return {"resources": {HEAD_RESOURCE: PIN}}


def gateway_actor_options(settings: Settings) -> Options:
    """Gateway replicas (Serve ``ray_actor_options``): off accelerator nodes."""
    return _off_accelerators(settings)


def llm_on_accelerators(settings: Settings) -> bool:
    if settings.llm_placement == "auto":
        return settings.llm_device == "cuda"
    return settings.llm_placement == "accelerator"


def llm_actor_options(settings: Settings) -> Options:
    """vLLM replicas (merged into Serve ``ray_actor_options``): one accelerator unit each."""
    if not llm_on_accelerators(settings):
        return {}
    return {"resources": {settings.accelerator_resource: 1}}


def llm_deployment_options(options: Mapping[str, Any], settings: Settings) -> Options:
    """A vLLM deployment's Serve options placed: ``llm_actor_options`` merged into the replica's
    actor options and, for a model split over several GPUs, into the first placement-group
    bundle too (the replica actor runs in it, so what it asks must be in the bundle)."""
    extra = llm_actor_options(settings)
    if not extra:
        return dict(options)
    placed: Options = {**options, "ray_actor_options": merged(options["ray_actor_options"], extra)}
    bundles = options.get("placement_group_bundles")
    if bundles:
        first = {**bundles[0], **{k: float(v) for k, v in extra.get("resources", {}).items()}}
        placed["placement_group_bundles"] = [first, *bundles[1:]]
    return placed


def embedder_actor_options(settings: Settings) -> Options:
    """Embedder replicas: ``cpu`` (off accelerator nodes), ``accelerator`` or ``any``."""
    match settings.embedder_placement:
        case "cpu":
            return {"label_selector": {NODE_GROUP_LABEL: f"!{ACCELERATOR_GROUP}"}}
        case "accelerator":
            return {"label_selector": {NODE_GROUP_LABEL: ACCELERATOR_GROUP}}
        case "any":
            return {}


def merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> Options:
    """``base`` actor options with ``extra`` on top (``resources`` and ``label_selector`` merge)."""
    out: Options = {**base, **extra}
    for key in ("resources", "label_selector"):
        if key in base and key in extra:
            out[key] = {**base[key], **extra[key]}
    return out


def accelerator_node_labels() -> dict[str, str]:
    """The labels an accelerator node starts with (``ray start --labels``)."""
    return {NODE_GROUP_LABEL: ACCELERATOR_GROUP}


def cpu_node_labels() -> dict[str, str]:
    return {NODE_GROUP_LABEL: CPU_GROUP}


@dataclass(frozen=True, slots=True)
class NodeView:
    """What placement needs to know of a live node (from ``ray.nodes()``)."""

    node_id: str
    resources: Mapping[str, float]
    labels: Mapping[str, str]


def check_nodes(settings: Settings, nodes: Iterable[NodeView]) -> list[str]:
    """Problems that would make placement wrong or impossible, as sentences naming the setting.

    Empty when the cluster can run what the settings ask for.
    """
    alive = list(nodes)
    problems: list[str] = []
    resource = settings.accelerator_resource
    carrying = [n for n in alive if n.resources.get(resource, 0) > 0]
    for node in carrying:
        if node.labels.get(NODE_GROUP_LABEL) != ACCELERATOR_GROUP:
            problems.append(
                f"node {node.node_id[:12]} advertises the accelerator resource '{resource}' "
                f"(WONDER_ACCELERATOR_RESOURCE) but not the label "
                f"{NODE_GROUP_LABEL}={ACCELERATOR_GROUP}: start it with "
                f"`ray start --labels {NODE_GROUP_LABEL}={ACCELERATOR_GROUP}` so that "
                "conversations stay off it"
            )
    if llm_on_accelerators(settings):
        units = sum(n.resources.get(resource, 0) for n in carrying)
        if units < settings.llm_num_replicas:
            problems.append(
                f"the vLLM deployment needs {settings.llm_num_replicas} unit(s) of the "
                f"accelerator resource '{resource}' (WONDER_ACCELERATOR_RESOURCE, "
                f"WONDER_LLM_PLACEMENT={settings.llm_placement}, "
                f"WONDER_LLM_DEVICE={settings.llm_device}, WONDER_LLM_NUM_REPLICAS="
                f"{settings.llm_num_replicas}) but the cluster's nodes offer {units:g}"
            )
    if not settings.actors_on_accelerator_nodes and alive and len(carrying) == len(alive):
        problems.append(
            "every node is an accelerator node: conversation actors have nowhere to run "
            "(add a CPU node, or set WONDER_ACTORS_ON_ACCELERATOR_NODES=true)"
        )
    return problems
