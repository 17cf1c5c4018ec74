"""Node loss: SIGKILL a worker node (raylet, agents and workers) while turns run; every
acknowledged message is kept, and the affected conversations re-activate on surviving nodes and
answer their next message."""

from __future__ import annotations

import time

from cluster.naming import conversation_actor_name
from cluster.placement import cpu_node_labels
from core.domain import MessageRole, TurnStatus
from tests.cluster.conftest import MultiNode, actor_nodes
from tests.conftest import wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile

BATCH = 8


def test_conversations_survive_the_loss_of_their_node(multinode: MultiNode) -> None:
    victim = multinode.nodes.add_worker("cpu-victim", cpu_node_labels())
    store = multinode.store
    client_id, _ = make_client(store)
    script = [
        {"match": "slow", "delay_s": 5.0, "reply": "re: {{last_user}}"},
        {"match": "", "reply": "re: {{last_user}}"},  # every other message
    ]
    agent = make_agent(store, client_id, scripted_profile(store, script))

    on_victim: list[str] = []
    for _ in range(3):  # SPREAD goes round the nodes: a batch or two puts some on the victim
        batch = [make_conversation(store, client_id, agent).id for _ in range(BATCH)]
        assert multinode.drive("converse", conversations=batch, text="first")["statuses"] == [
            "completed"
        ] * len(batch)
        names = {conversation_actor_name(c): c for c in batch}
        wanted = list(names)
        where = wait_for(
            lambda w=wanted: len(found := actor_nodes(multinode, w)) == BATCH and found  # type: ignore[misc]
        )
        on_victim += [names[n] for n, node in where.items() if node == victim.node_id]
        if on_victim:
            break
    assert on_victim, "no conversation was placed on the node to be killed"

    # Turns in flight (the model takes 5 s) when the node dies: their messages are acknowledged.
    acked = multinode.drive("post", conversations=on_victim, text="slow")["turns"]
    assert len(acked) == len(on_victim)
    victim.kill()
    killed = time.monotonic()
    after = multinode.drive("converse", conversations=on_victim, text="second")
    recovered_s = time.monotonic() - killed
    print(f"\n{len(on_victim)} conversation(s) answered {recovered_s:.1f}s after their node died")
    assert after["statuses"] == ["completed"] * len(on_victim)

    for conv, slow in zip(on_victim, acked, strict=True):
        # The turn cut by the node's loss resumes on the re-activated actor (durable turns):
        # answered on the same turn, beside the next message's turn.
        ended = wait_for(
            lambda t=slow: (turn := store.turns.get(t)).status is not TurnStatus.ACTIVE and turn,  # type: ignore[misc]
            timeout=60,
        )
        assert ended.status is TurnStatus.COMPLETED, ended
        messages = [(m.role, m.content) for m in store.messages.list(conv)]
        users = [content for role, content in messages if role is MessageRole.USER]
        assert users == ["first", "slow", "second"]  # every acknowledged message kept
        assert messages[:2] == [(MessageRole.USER, "first"), (MessageRole.AGENT, "re: first")]
        replies = sorted(content for role, content in messages[2:] if role is MessageRole.AGENT)
        assert replies == ["re: second", "re: slow"]  # one answer each
        seqs = [e.seq for e in store.events.list(conv)]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap in the event log
    multinode.nodes.wait_dead(victim)  # the GCS's health checks notice (seconds later)
    for conv in on_victim:
        name = conversation_actor_name(conv)
        survivor = wait_for(
            lambda n=name: (node := actor_nodes(multinode, [n]).get(n)) != victim.node_id and node,  # type: ignore[misc]
            timeout=60,
        )
        assert survivor in {n.node_id for n in multinode.nodes.nodes.values()} - {victim.node_id}
