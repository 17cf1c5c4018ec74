"""Driver work on the multi-node cluster, run as a subprocess of the tests.

``python -m tests.cluster.driver SCENARIO 'JSON'`` connects to ``RAY_ADDRESS`` (the tier's
head), runs one scenario and prints its result as JSON on the last line of stdout. The test
process keeps its own (session-wide) Ray untouched: a process can be the driver of one cluster
only.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster import placement, wiring
from cluster.gateway import build_gateway_app, start_serve
from cluster.naming import existing_actor, workspace_actor_name
from cluster.preflight import SetupError, check_placement
from core.errors import NotFound
from core.projects import workspace_for
from core.settings import settings_from_env, wonder_env
from core.store import open_store

Result = dict[str, Any]


@ray.remote(num_cpus=0)
class Probe:
    """Reports the node it was placed on."""

    def node(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


def _placed_on(options: dict[str, Any]) -> str:
    probe: Any = Probe.options(**options).remote()  # type: ignore[attr-defined]
    try:
        return str(ray.get(probe.node.remote(), timeout=120))
    finally:
        ray.kill(probe)


async def converse(args: Result) -> Result:
    """Post ``text`` to every conversation at once; wait for each turn; the outcomes."""
    conversations = wiring.conversations(wonder_env())
    acks = await asyncio.gather(
        *(conversations.post_message(c, args["text"], "user-1") for c in args["conversations"])
    )
    outcomes = await asyncio.gather(
        *(conversations.wait_for_turn(a.conversation_id, a.turn_id, 240) for a in acks)
    )
    return {"statuses": [o.status.value for o in outcomes]}


async def post(args: Result) -> Result:
    """Post ``text`` to every conversation at once; the acknowledged turn ids (no waiting)."""
    conversations = wiring.conversations(wonder_env())
    acks = await asyncio.gather(
        *(conversations.post_message(c, args["text"], "user-1") for c in args["conversations"])
    )
    return {"turns": [a.turn_id for a in acks]}


async def placements(args: Result) -> Result:
    """Where the model deployments' and the singletons' options put a probe actor."""
    base = settings_from_env(wonder_env())
    gpu = base.model_copy(update={"llm_placement": "accelerator"})
    embedder_on_gpu = base.model_copy(update={"embedder_placement": "accelerator"})
    rounds = int(args.get("rounds", 2))
    out: dict[str, list[str]] = {"llm": [], "embedder": [], "embedder_on_gpu": [], "singleton": []}
    for _ in range(rounds):
        out["llm"].append(_placed_on(placement.llm_actor_options(gpu)))
        out["embedder"].append(_placed_on(placement.embedder_actor_options(gpu)))
        out["embedder_on_gpu"].append(_placed_on(placement.embedder_actor_options(embedder_on_gpu)))
        out["singleton"].append(_placed_on(placement.singleton_options()))
    refusals: list[str] = []
    check_placement(gpu)  # one accelerator unit, one replica: fits
    try:
        check_placement(gpu.model_copy(update={"llm_num_replicas": 2}))
    except SetupError as exc:
        refusals.append(str(exc))
    return {**out, "refusals": refusals}


def _serve_gateway(replicas: int) -> int:
    from ray import serve

    env = {**wonder_env(), "WONDER_GATEWAY_NUM_REPLICAS": str(replicas)}
    settings = settings_from_env(env)
    start_serve(settings)
    serve.run(build_gateway_app(env), name="gateway", route_prefix="/")
    return settings.gateway_port


async def serve_gateway(args: Result) -> Result:
    """Start Serve (its proxy where ``WONDER_SERVE_PROXY_LOCATION`` says) and deploy the gateway
    with ``replicas`` replicas, as ``wonder up`` does; Serve keeps them after this driver exits."""
    port = await asyncio.to_thread(_serve_gateway, int(args["replicas"]))
    return {"port": port}


async def _workspace_calls(args: Result) -> Result:
    """Write then read files in a conversation's workspace (``stop`` first: its actor is stopped
    and made again); the node its actor answers from and what it read."""
    env = wonder_env()
    settings = settings_from_env(env)
    store = open_store(env)
    spec = workspace_for(
        store, settings, conversation_id=args["conversation"], agent_id=args["agent"]
    )
    workspaces = wiring.workspaces(env)
    if args.get("stop"):
        workspaces.stop(spec.workspace_id)
    for path, content in args.get("write", {}).items():
        await workspaces.write(spec, path, content)
    read = {}
    for path in args.get("read", []):
        try:
            read[path] = (await workspaces.read(spec, path, 10_000)).content
        except NotFound:
            read[path] = None
    actor = existing_actor(workspace_actor_name(spec.workspace_id))
    node, _address = await actor.where.remote()
    record = store.workspaces.get(spec.workspace_id)
    return {
        "workspace": spec.workspace_id,
        "actor_node": node,
        "record_node": record.node_id if record else None,
        "read": read,
    }


@ray.remote(num_cpus=0)
def _workspace_task(args: Result) -> Result:
    return asyncio.run(_workspace_calls(args))


async def workspace(args: Result) -> Result:
    """``_workspace_calls`` from a task on ``from_node`` (a caller on that node), else here."""
    node = args.get("from_node")
    if node is None:
        return await _workspace_calls(args)
    pinned = NodeAffinitySchedulingStrategy(node, soft=False)
    result: Result = await _workspace_task.options(scheduling_strategy=pinned).remote(args)
    return result


async def directory(args: Result) -> Result:
    """The conversation directory's figures (``nodes``: its actors placed on each node)."""
    return dict(await wiring.conversations(wonder_env()).directory_stats())


async def statuses(args: Result) -> Result:
    """Each conversation's live actor status (its pid and node)."""
    conversations = wiring.conversations(wonder_env())
    found = await asyncio.gather(*(conversations.status(c) for c in args["conversations"]))
    return {"statuses": list(found)}


SCENARIOS: dict[str, Callable[[Result], Awaitable[Result]]] = {
    "converse": converse,
    "directory": directory,
    "post": post,
    "placements": placements,
    "serve": serve_gateway,
    "statuses": statuses,
    "workspace": workspace,
}


def main() -> None:
    scenario, raw = sys.argv[1], sys.argv[2]
    env = wonder_env()
    ray.init(address="auto", namespace="wonder", runtime_env={"env_vars": env})
    try:
        result = asyncio.run(SCENARIOS[scenario](json.loads(raw)))
    finally:
        ray.shutdown()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
