"""GCS fault tolerance: the head's GCS keeps its tables in Redis (``RAY_REDIS_ADDRESS``, the
session's ``redis-server``), so losing the head — its GCS, raylet, dashboard and every process on
it — and starting it again on the same address keeps the detached actors on the worker nodes:
a conversation answers afterwards from the same actor process. Runs last in the tier (the head
changes under everything)."""

from __future__ import annotations

import time

import pytest

from cluster.naming import DIRECTORY_NAME, conversation_actor_name
from core.domain import MessageRole
from tests.cluster.conftest import MultiNode, actor_nodes
from tests.conftest import wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile

pytestmark = pytest.mark.timeout(900)  # a head restart on a loaded 2-core box: minutes
CONVERSATIONS = 4


def placed(multinode: MultiNode, names: list[str]) -> dict[str, str]:
    """Actor name → node, once every one of ``names`` is alive."""
    return wait_for(lambda: len(found := actor_nodes(multinode, names)) == len(names) and found)


def test_a_head_restart_keeps_the_detached_actors_on_workers(multinode: MultiNode) -> None:
    store = multinode.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store, [{"reply": "re: {{last_user}}"}]))
    old_head = multinode.head.node_id
    convs = [make_conversation(store, client_id, agent).id for _ in range(CONVERSATIONS)]
    assert multinode.drive("converse", conversations=convs, text="before")["statuses"] == [
        "completed"
    ] * len(convs)
    names = {conversation_actor_name(c): c for c in convs}
    where = placed(multinode, list(names))
    # The directory puts conversation actors on the CPU workers while there are any.
    on_workers = [names[n] for n, node in where.items() if node != old_head]
    assert len(on_workers) == CONVERSATIONS, where
    before = multinode.drive("statuses", conversations=on_workers)["statuses"]

    multinode.head.kill()  # the GCS, the head's raylet, its actors: as if the head machine died
    killed = time.monotonic()
    multinode.nodes.restart_head()
    print(f"\nhead back {time.monotonic() - killed:.1f}s after it was killed")

    after = multinode.drive("converse", conversations=on_workers, text="after")
    print(f"{len(on_workers)} conversation(s) answered {time.monotonic() - killed:.1f}s after")
    assert after["statuses"] == ["completed"] * len(on_workers)
    now = multinode.drive("statuses", conversations=on_workers)["statuses"]
    # The same actor processes answer: Ray kept them (and their names) across the GCS restart.
    assert [s["pid"] for s in now] == [s["pid"] for s in before]
    still = actor_nodes(multinode, [conversation_actor_name(c) for c in on_workers])
    assert still == {
        conversation_actor_name(c): where[conversation_actor_name(c)] for c in on_workers
    }
    for conv in on_workers:
        messages = [(m.role, m.content) for m in store.messages.list(conv)]
        assert messages == [
            (MessageRole.USER, "before"),
            (MessageRole.AGENT, "re: before"),
            (MessageRole.USER, "after"),
            (MessageRole.AGENT, "re: after"),
        ]
    # The singletons that lived on the old head were restarted on the new one.
    directory = wait_for(lambda: actor_nodes(multinode, [DIRECTORY_NAME]).get(DIRECTORY_NAME))
    assert directory == multinode.head.node_id != old_head
