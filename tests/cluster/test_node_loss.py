"""Node loss: SIGKILL a worker node (raylet, agents and workers) while turns, async operations and
WebSocket streams run. Every acknowledged message is kept; each affected conversation re-activates
on a surviving node and answers its next message; WebSocket clients — those connected through the
gateway replica on the lost node among them — reconnect through Serve's proxy to another replica
and resume by ``seq`` with no gap and no duplicate; each pending async operation runs once and is
delivered once.

Placement, deliberately: Serve's one proxy is on the head (``WONDER_SERVE_PROXY_LOCATION=HeadOnly``:
the nodes share 127.0.0.1, where one port takes one proxy; it stands for a cluster's load balancer
and spreads connections over all replicas, ``RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING=0``) and the
gateway has one replica per node that may hold it (Serve spreads replicas over nodes), so one
replica is on the node that dies.
Async operations run on the head (the runner is pinned there, its executor tasks beside it).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cluster.local_cluster import Node
from cluster.naming import conversation_actor_name
from cluster.placement import cpu_node_labels
from cluster.stream_client import ResumingStream
from core.domain import Agent, MessageRole, OperationStatus, TurnStatus
from core.store import Store
from tests.cluster.conftest import MultiNode, actor_nodes, gateway_replica_nodes
from tests.conftest import async_wait_for, wait_for
from tests.factories import (
    make_agent,
    make_client,
    make_conversation,
    scripted_profile,
    task_tool,
)

pytestmark = pytest.mark.timeout(900)  # a node start and 6+ actor starts on a loaded 2-core box
BATCH = 6
SLOW_S = 2.0  # the turn in flight when the node dies
RESEARCH_S = 8.0  # the async operation running when the node dies
TURN_TIMEOUT_S = 240.0


def _agent(store: Store, client_id: str, runs: Path) -> Agent:
    research = task_tool(
        store,
        "research",
        [{"kind": "python", "params": {"callable": "tests.callables:record_then_wait"}}],
        schema={"type": "object", "properties": {"path": {"type": "string"}}},
        is_async=True,
    )
    script = [  # rules: the first whose text is in the last message answers
        {"match": "[background result]", "reply": "Research done."},
        {"match": "dispatched", "reply": "Researching; I will report back."},
        {
            "match": "research",
            "tool_calls": [
                {"name": "research", "arguments": {"path": str(runs), "seconds": RESEARCH_S}}
            ],
        },
        {"match": "slow", "delay_s": SLOW_S, "reply": "re: {{last_user}}"},
        {"match": "", "reply": "re: {{last_user}}"},
    ]
    return make_agent(store, client_id, scripted_profile(store, script), [research])


def _conversations_on(multinode: MultiNode, victim: Node, agent: Agent) -> list[str]:
    """New conversations, answered once, until some live on ``victim`` (the directory puts new
    actors on the worker holding the fewest, the new victim, once its view of the nodes, at most
    ``NODES_SEEN_S`` old, has it)."""
    store = multinode.store
    for _ in range(3):
        batch = [make_conversation(store, agent.client_id, agent).id for _ in range(BATCH)]
        done = multinode.drive("converse", conversations=batch, text="first")
        assert done["statuses"] == ["completed"] * len(batch)
        names = {conversation_actor_name(c): c for c in batch}
        where = wait_for(
            lambda n=names: len(found := actor_nodes(multinode, list(n))) == len(n) and found  # type: ignore[misc]
        )
        on_victim = [names[n] for n, node in where.items() if node == victim.node_id]
        if on_victim:
            return on_victim
    raise AssertionError("no conversation was placed on the node to be killed")


async def test_turns_operations_and_streams_survive_the_loss_of_a_node(
    multinode: MultiNode, tmp_path: Path
) -> None:
    victim = multinode.nodes.add_worker("cpu-victim", cpu_node_labels())
    may_serve = [n for n in multinode.nodes.nodes.values() if n is not multinode.accelerator]
    multinode.drive("serve", replicas=len(may_serve))
    replicas = wait_for(lambda: len(r := gateway_replica_nodes(multinode)) == len(may_serve) and r)
    assert victim.node_id in replicas  # one replica per node, the victim's among them

    store = multinode.store
    client_id, key = make_client(store)
    runs = tmp_path / "research-runs"
    convs = _conversations_on(multinode, victim, _agent(store, client_id, runs))

    # Each conversation gets a stream per replica, and more until some go through the victim's
    # replica (the proxy spreads new connections over the replicas).
    streams: list[ResumingStream] = []
    for conv in convs * len(may_serve) + convs * 4 * len(may_serve):
        if len(streams) >= len(convs) * len(may_serve) and any(
            s.node == victim.node_id for s in streams
        ):
            break
        stream = ResumingStream(multinode.gateway_url, key, conv)
        await stream.open()
        streams.append(stream)
    through_victim = [s for s in streams if s.node == victim.node_id]
    assert through_victim, f"no stream through the victim's replica: {[s.node for s in streams]}"
    talkers = {conv: next(s for s in streams if s.conversation_id == conv) for conv in convs}

    async def acknowledged(stream: ResumingStream, text: str) -> str:
        frame_id = await stream.send(text)
        await stream.wait_acked(frame_id, TURN_TIMEOUT_S)
        return frame_id

    research = {c: await acknowledged(s, "research otters") for c, s in talkers.items()}
    await async_wait_for(
        lambda: all(store.async_operations.list(c) for c in convs), timeout=60, interval=0.2
    )
    slow = {c: await acknowledged(s, "slow one") for c, s in talkers.items()}

    # Turns in flight (the model takes SLOW_S), operations running (RESEARCH_S), streams open.
    victim.kill()
    killed = time.monotonic()
    second = {c: await s.send("second") for c, s in talkers.items()}
    waited = await asyncio.gather(
        *(talkers[c].wait_turn(second[c], TURN_TIMEOUT_S) for c in convs), return_exceptions=True
    )
    assert not [w for w in waited if isinstance(w, BaseException)], [
        (
            t.conversation_id[-6:],
            t.nodes,
            len(t.breaks),
            [(x.content, x.acked, x.ended) for x in t.turns.values()],
        )
        for t in talkers.values()
    ]
    answered = [w for w in waited if not isinstance(w, BaseException)]
    recovered = sorted(t.ended_at - killed for t in answered if t.ended_at is not None)
    print(
        f"\n{len(convs)} conversation(s) on the lost node answered their next message "
        f"{recovered[0]:.1f}-{recovered[-1]:.1f}s after the kill; "
        f"{len(through_victim)}/{len(streams)} streams went through its gateway replica; "
        f"next messages refused (retriable) and sent again: "
        f"{sum(len(t.refusals) for t in answered)}"
    )
    assert [t.ended for t in answered] == ["turn.completed"] * len(convs)
    for conv in convs:
        for frame_id in (research[conv], slow[conv]):
            seen = await talkers[conv].wait_turn(frame_id, TURN_TIMEOUT_S)
            assert seen.ended == "turn.completed", (conv, seen)

    # Every stream, whichever replica it went through, reads on to the end of its conversation.
    final = {c: store.events.list(c)[-1].seq for c in convs}
    for stream in streams:
        await stream.wait_seq(final[stream.conversation_id], TURN_TIMEOUT_S)
        await stream.close()
        assert stream.seqs == list(range(1, stream.last_seq + 1)), stream.conversation_id
    for stream in through_victim:
        assert stream.breaks and stream.node != victim.node_id  # reconnected elsewhere

    ops = [op for c in convs for op in store.async_operations.list(c)]
    ran = runs.read_text().count("ran") if runs.exists() else 0
    assert ran == len(convs), [(op.status, op.result) for op in ops]  # each operation ran once
    for conv in convs:
        messages = store.messages.list(conv)
        users = [m.content for m in messages if m.role is MessageRole.USER]
        assert users == ["first", "research otters", "slow one", "second"]  # all acknowledged
        replies = sorted(m.content for m in messages if m.role is MessageRole.AGENT)
        assert replies == sorted(
            [
                "re: first",
                "Researching; I will report back.",
                "Research done.",
                "re: slow one",
                "re: second",
            ]
        )
        assert [t.status for t in store.turns.list(conv)] == [TurnStatus.COMPLETED] * 4
        [operation] = store.async_operations.list(conv)
        assert operation.status is OperationStatus.DELIVERED
        seqs = [e.seq for e in store.events.list(conv)]
        assert seqs == list(range(1, len(seqs) + 1))

    multinode.nodes.wait_dead(victim)
    survivors = {n.node_id for n in multinode.nodes.nodes.values()} - {victim.node_id}
    where = actor_nodes(multinode, [conversation_actor_name(c) for c in convs])
    assert set(where.values()) <= survivors
