"""Wonder on several Ray nodes of this machine: turns/s over the gateway WebSocket, and
a node-kill drill.

Starts PostgreSQL and moto's S3 on 127.0.0.1 (``cluster.local_services``) and N Ray nodes
(``cluster.local_cluster``: a head and N-1 CPU workers, one CPU each, each its own raylet, a
lost node detected in about 1.5 s as ``wonder up`` does), then deploys the gateway with one
replica per node behind Serve's one proxy on the head (which stands for a load balancer and
spreads connections over the replicas). Every conversation is driven by its own WebSocket client
that resumes by ``seq`` when its connection breaks (``cluster.stream_client``).

- ``throughput``: C conversations (default 24) x T turns (default 5) of a zero-latency scripted
  echo, all clients at once; the baseline is one conversation alone, same turns, same run.
  Printed: turns/s at C and at 1 (and their ratio), conversation actors per node.
- ``drill``: K trials (default 20). In each, new conversations are answered once until some live
  on one worker (the victim); each of those sends a message whose turn is in flight when the
  victim's process group gets SIGKILL (the model takes 1 s), then its next message. A fresh
  worker replaces the victim for the next trial. Counted: acknowledged messages missing from the
  store, gaps and duplicates in the durable events each client saw (across its reconnects), next
  messages answered, and the time from the kill to each next answer (p50/p99), beside the same
  conversations' answer time without a kill (the baseline, measured just before).

Prints progress, then ONE JSON object as the last line (with the load average at start and end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from typing import Any

from harness import pct, reporter  # first: it puts the repository on sys.path

# isort: split
from cluster.local_cluster import LocalCluster, Node
from cluster.local_services import PostgresServer, S3Server, start_postgres, start_s3
from cluster.naming import conversation_actor_name
from cluster.stream_client import ResumingStream

progress = reporter("cluster_scale")
TURN_TIMEOUT_S = 180.0
IN_FLIGHT_S = 1.0
CPU = {"wonder.io/node-group": "cpu"}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


class Bench:
    """The cluster, its stores, the gateway and a client with two scripted agents."""

    def __init__(self, nodes: int) -> None:
        self.n = nodes
        self.pg: PostgresServer = start_postgres(max_connections=400)
        self.s3: S3Server = start_s3()
        bucket = self.s3.make_bucket()
        self.data_dir = tempfile.mkdtemp(prefix="wonder-bench-cluster-")
        self.temp_dir = tempfile.mkdtemp(prefix="wbc", dir="/tmp")
        self.env = {
            "WONDER_DATA_DIR": self.data_dir,
            "WONDER_DATABASE_URL": self.pg.create_database(),
            "WONDER_OBJECT_URI": f"s3://{bucket}/objects",
            "WONDER_LANCE_URI": f"s3://{bucket}/lance",
            "WONDER_S3_ENDPOINT_URL": self.s3.endpoint_url,
            "WONDER_ALLOW_TEST_DOUBLES": "true",  # the scripted echo model is a test double
            # The resident cap and idle TTL are the shipped defaults (64, 600 s): the drill makes
            # new conversations every trial, and with a cap of 512 some 200 idle actor processes
            # piled up over 20 trials on the 2 cores, so the later trials measured the pile-up.
            "WONDER_SERVE_PROXY_LOCATION": "HeadOnly",
            "WONDER_GATEWAY_NUM_REPLICAS": str(nodes),
            "WONDER_GATEWAY_PORT": str(_free_port()),
        }
        process_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("WONDER_", "RAY_ADDR"))},
            **self.s3.env,
            **self.env,
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": self.temp_dir,
            "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
        }
        self.cluster = LocalCluster(self.temp_dir, process_env)
        self.workers = 0
        self.url = f"http://127.0.0.1:{self.env['WONDER_GATEWAY_PORT']}"

    def start(self) -> None:
        started = time.monotonic()
        self.cluster.start_head()
        for _ in range(self.n - 1):
            self.add_worker()
        progress(f"{self.n} nodes up in {time.monotonic() - started:.1f}s (load {load()})")
        import ray

        ray.init(address=self.cluster.address, namespace="wonder", log_to_driver=False)
        from ray import serve

        from cluster.gateway import build_gateway_app, start_serve
        from core.settings import settings_from_env

        start_serve(settings_from_env(self.env))
        serve.run(build_gateway_app(self.env), name="gateway", route_prefix="/")
        from core.store import open_store

        self.store = open_store(self.env)
        self._agents()

    def add_worker(self) -> Node:
        self.workers += 1
        return self.cluster.add_worker(f"cpu-{self.workers}", CPU)

    def _agents(self) -> None:
        from core.domain import Agent, Client, ModelProfile, Persona, PersonaRef, ScriptStep
        from core.ids import new_id, utc_now

        store = self.store
        client = Client(id=new_id("client"), name="bench", created_at=utc_now())
        store.clients.insert(client)
        self.key = f"wk_{new_id()}"
        store.clients.add_api_key(client.id, self.key, utc_now())
        script = [
            ScriptStep.model_validate(s)
            for s in (
                {"match": "slow", "delay_s": IN_FLIGHT_S, "reply": "re: {{last_user}}"},
                {"match": "", "reply": "re: {{last_user}}"},
            )
        ]
        store.model_profiles.put(
            ModelProfile(id="echo", provider="scripted", model="script", script=script), utc_now()
        )
        store.personas.put(
            Persona(id="echo", system_prompt="You echo.", model_profile_id="echo"), utc_now()
        )
        agent = Agent(
            id=new_id("agent"),
            client_id=client.id,
            name="echo",
            persona_ref=PersonaRef(id="echo"),
            created_at=utc_now(),
        )
        self.agent_id = store.agents.insert(agent).id

    def new_conversations(self, count: int) -> list[str]:
        import httpx

        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60, trust_env=False) as c:
            made = [
                c.post("/v1/conversations", json={"agent_id": self.agent_id}) for _ in range(count)
            ]
        return [str(r.json()["id"]) for r in made]

    def placement(self, convs: list[str]) -> dict[str, str]:
        """conversation → node id of its live actor."""
        from ray.util.state import list_actors

        names = {conversation_actor_name(c): c for c in convs}
        found = list_actors(
            address=self.cluster.dashboard_url,
            filters=[("state", "=", "ALIVE")],
            limit=10_000,
            raise_on_missing_output=False,
        )
        return {names[a.name]: a.node_id for a in found if a.name in names}

    def stop(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
        self.pg.stop()
        self.s3.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _free_port() -> int:
    from cluster.bootstrap import free_port

    return free_port()


async def converse(stream: ResumingStream, texts: list[str]) -> list[float]:
    """Each message in turn, awaited to its end; the seconds each took."""
    took = []
    for text in texts:
        sent = time.monotonic()
        seen = await stream.wait_turn(await stream.send(text), TURN_TIMEOUT_S)
        if seen.ended != "turn.completed":
            raise RuntimeError(f"{stream.conversation_id}: {text!r} ended {seen.ended}")
        took.append(time.monotonic() - sent)
    return took


async def throughput(bench: Bench, conversations: int, turns: int) -> dict[str, Any]:
    async def run(count: int) -> tuple[float, list[str]]:
        convs = bench.new_conversations(count)
        streams = [ResumingStream(bench.url, bench.key, c) for c in convs]
        await asyncio.gather(*(s.open(TURN_TIMEOUT_S) for s in streams))
        await asyncio.gather(*(converse(s, ["hello"]) for s in streams))  # actors started
        started = time.monotonic()
        await asyncio.gather(*(converse(s, [f"t{i}" for i in range(turns)]) for s in streams))
        elapsed = time.monotonic() - started
        await asyncio.gather(*(s.close() for s in streams))
        return count * turns / elapsed, convs

    alone, _ = await run(1)
    progress(f"baseline: 1 conversation, {alone:.1f} turns/s (load {load()})")
    many, convs = await run(conversations)
    per_node: dict[str, int] = {}
    for node in bench.placement(convs).values():
        per_node[node[:8]] = per_node.get(node[:8], 0) + 1
    progress(f"{conversations} conversations: {many:.1f} turns/s, per node {per_node}")
    return {
        "conversations": conversations,
        "turns_each": turns,
        "turns_per_s": round(many, 2),
        "baseline_turns_per_s_1_conversation": round(alone, 2),
        "ratio": round(many / alone, 2),
        "conversations_per_node": sorted(per_node.values(), reverse=True),
        "load": load(),
    }


async def trial(bench: Bench, victim: Node, batch: int) -> dict[str, Any]:
    """Conversations on ``victim``, a turn in flight on each when it dies, then the next."""
    on_victim: list[str] = []
    others: list[ResumingStream] = []
    streams: dict[str, ResumingStream] = {}
    for _ in range(5):
        convs = bench.new_conversations(batch)
        fresh = {c: ResumingStream(bench.url, bench.key, c) for c in convs}
        await asyncio.gather(*(s.open(TURN_TIMEOUT_S) for s in fresh.values()))
        await asyncio.gather(*(converse(s, ["first"]) for s in fresh.values()))
        where = bench.placement(convs)
        for conv, stream in fresh.items():
            if where.get(conv) == victim.node_id:
                on_victim.append(conv)
                streams[conv] = stream
            else:
                others.append(stream)
        if on_victim:
            break
    await asyncio.gather(*(s.close() for s in others))
    if not on_victim:
        raise RuntimeError("no conversation landed on the victim in 5 batches")
    baseline = [t for s in streams.values() for t in await converse(s, ["warm"])]
    slow = {c: await s.send("slow") for c, s in streams.items()}
    await asyncio.gather(*(s.wait_acked(slow[c], TURN_TIMEOUT_S) for c, s in streams.items()))
    victim.kill()
    killed = time.monotonic()
    detection = asyncio.create_task(asyncio.to_thread(bench.cluster.wait_dead, victim))
    nxt = {c: await s.send("next") for c, s in streams.items()}
    ends = await asyncio.gather(
        *(s.wait_turn(nxt[c], TURN_TIMEOUT_S) for c, s in streams.items()), return_exceptions=True
    )
    answered = [e for e in ends if not isinstance(e, BaseException) and e.ended == "turn.completed"]
    recovery = [e.ended_at - killed for e in answered if e.ended_at is not None]
    lost = gaps = duplicates = breaks = 0
    for conv, stream in streams.items():
        await stream.wait_turn(slow[conv], TURN_TIMEOUT_S)
        last = bench.store.events.list(conv)[-1].seq
        await stream.wait_seq(last, TURN_TIMEOUT_S)
        await stream.close()
        stored = {m.content for m in bench.store.messages.list(conv) if m.role.value == "user"}
        acked = {t.content for t in stream.turns.values() if t.turn_id is not None}
        lost += len(acked - stored)
        missing, doubled = stream.gaps_and_duplicates()
        gaps, duplicates, breaks = gaps + missing, duplicates + doubled, breaks + len(stream.breaks)
    return {
        "conversations": len(streams),
        "answered": len(answered),
        "recovery_s": recovery,
        "baseline_s": baseline,
        "lost": lost,
        "gaps": gaps,
        "duplicates": duplicates,
        "reconnects": breaks,
        "dead_declared_after_s": round(await detection, 1),
    }


async def drill(bench: Bench, trials: int, batch: int, budget_s: float) -> dict[str, Any]:
    results = []
    started = time.monotonic()
    for k in range(1, trials + 1):
        if time.monotonic() - started > budget_s:
            progress(f"time budget ({budget_s:.0f}s) spent after {k - 1} trials")
            break
        victim = bench.cluster.nodes[f"cpu-{bench.workers}"]
        result = await trial(bench, victim, batch)
        results.append(result)
        progress(
            f"trial {k}: {result['answered']}/{result['conversations']} answered, "
            f"recovery {', '.join(f'{r:.1f}' for r in result['recovery_s'])}s, "
            f"lost {result['lost']}, gaps {result['gaps']}, dups {result['duplicates']} "
            f"(load {load()})"
        )
        try:
            bench.add_worker()  # the cluster is N nodes again
        except Exception as exc:  # `ray start` gave up three times: a loaded machine
            progress(f"no replacement worker after trial {k} ({type(exc).__name__}): stopping")
            break
    recovery = [r for t in results for r in t["recovery_s"]]
    detected = [t["dead_declared_after_s"] for t in results]
    baseline = [b for t in results for b in t["baseline_s"]]
    return {
        "trials": len(results),
        "conversations_hit": sum(t["conversations"] for t in results),
        "next_messages_answered": sum(t["answered"] for t in results),
        "acknowledged_messages_lost": sum(t["lost"] for t in results),
        "stream_gaps": sum(t["gaps"] for t in results),
        "stream_duplicates": sum(t["duplicates"] for t in results),
        "stream_reconnects": sum(t["reconnects"] for t in results),
        "recovery_s": {"p50": round(pct(recovery, 0.5), 2), "p99": round(pct(recovery, 0.99), 2)}
        if recovery
        else None,
        "node_declared_dead_after_s": {
            "p50": round(pct(detected, 0.5), 2),
            "max": max(detected),
        }
        if detected
        else None,
        "baseline_answer_s": {
            "p50": round(pct(baseline, 0.5), 2),
            "p99": round(pct(baseline, 0.99), 2),
        }
        if baseline
        else None,
        "load": load(),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args.nodes)
    out: dict[str, Any] = {"nodes": args.nodes, "load_at_start": load()}
    try:
        bench.start()
        if args.conversations:
            out["throughput"] = await throughput(bench, args.conversations, args.turns)
        if args.trials:
            out["drill"] = await drill(bench, args.trials, args.batch, args.budget_s)
    finally:
        bench.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3, help="Ray nodes: a head and N-1 workers")
    parser.add_argument("--conversations", type=int, default=24, help="throughput: C at once")
    parser.add_argument("--turns", type=int, default=5, help="throughput: turns per conversation")
    parser.add_argument("--trials", type=int, default=20, help="drill: node kills")
    parser.add_argument("--batch", type=int, default=6, help="drill: new conversations per try")
    parser.add_argument(
        "--budget-s", type=float, default=1800, help="drill: stop starting trials after this"
    )
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args))), flush=True)


if __name__ == "__main__":
    main()
