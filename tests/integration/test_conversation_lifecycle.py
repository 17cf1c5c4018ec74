"""Residency and recovery on a real local Ray: eviction, re-activation, kill -9, replay by seq."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import ray

from core.domain import MessageRole, TurnStatus
from tests.conftest import TEST_CONVERSATION_IDLE_TTL_S, Cluster, async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile
from tests.integration.access import conversations, post


def _alive_conversation_actors() -> set[str]:
    from ray.util.state import list_actors

    from tests.conftest import dashboard_url

    alive = list_actors(
        address=dashboard_url(),
        filters=[("state", "=", "ALIVE")],
        limit=10_000,
        raise_on_missing_output=False,
    )
    return {a.name for a in alive if (a.name or "").startswith("conversation:")}


async def _completed(cluster: Cluster, turn_id: str) -> None:
    await async_wait_for(
        lambda: cluster.store.turns.get(turn_id).status is TurnStatus.COMPLETED, timeout=60
    )


@pytest.fixture
async def small_cap(ray_cluster: Cluster):  # type: ignore[no-untyped-def]
    before = await conversations().directory_stats()
    await conversations().configure_directory(max_resident=3)
    yield 3
    await conversations().configure_directory(max_resident=before["max_resident"])


async def test_resident_actors_stay_under_the_cap_and_reactivate(
    ray_cluster: Cluster, small_cap: int
) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    convs = [make_conversation(store, client_id, agent) for _ in range(6)]
    for conv in convs:
        ack = await post(conv.id, f"hello {conv.id}", "u")
        await _completed(ray_cluster, ack.turn_id)
        stats = await conversations().directory_stats()
        assert stats["resident"] <= small_cap
    assert (await conversations().directory_stats())["evictions"] >= 3
    mine = {f"conversation:{c.id}" for c in convs}
    assert len(_alive_conversation_actors() & mine) <= small_cap

    # The first conversation was evicted: messaging it re-activates it with its history intact.
    first = convs[0]
    assert f"conversation:{first.id}" not in _alive_conversation_actors()
    ack = await post(first.id, "again", "u")
    await _completed(ray_cluster, ack.turn_id)
    contents = [m.content for m in store.messages.list(first.id)]
    assert contents == [f"hello {first.id}", f"echo: hello {first.id}", "again", "echo: again"]
    seqs = [e.seq for e in store.events.list(first.id)]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_idle_actor_evicts_itself_after_the_ttl(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    conv = make_conversation(store, client_id, agent)
    await conversations().configure_directory(idle_ttl_s=0.5)
    try:
        ack = await post(conv.id, "hi", "u")
        await _completed(ray_cluster, ack.turn_id)
        name = f"conversation:{conv.id}"
        await async_wait_for(
            lambda: name not in _alive_conversation_actors(), timeout=30, interval=0.3
        )
    finally:
        await conversations().configure_directory(idle_ttl_s=TEST_CONVERSATION_IDLE_TTL_S)
    ack = await post(conv.id, "back", "u")
    await _completed(ray_cluster, ack.turn_id)
    assert store.messages.list(conv.id)[-1].content == "echo: back"


async def test_kill_9_mid_turn_loses_no_acknowledged_message(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    slow = scripted_profile(store, [{"reply": "too late", "delay_s": 30}])
    agent = make_agent(store, client_id, slow)
    conv = make_conversation(store, client_id, agent)
    ack = await post(conv.id, "this must survive", "u")
    status = await conversations().status(conv.id)
    assert status["active_turns"] == [ack.turn_id]

    # From now on the agent answers fast: the restarted actor resumes the interrupted turn
    # (tests/integration/test_durable_turns.py covers resumption itself).
    from core.ids import utc_now

    persona = store.personas.get(store.agents.get(agent.id).persona_ref.id)  # type: ignore[union-attr]
    fast = scripted_profile(store)
    store.personas.put(persona.model_copy(update={"model_profile_id": fast.id}), utc_now())
    os.kill(status["pid"], signal.SIGKILL)

    await _completed(ray_cluster, ack.turn_id)
    assert store.messages.get(ack.message_id).content == "this must survive"
    second = await post(conv.id, "still there?", "u")
    await _completed(ray_cluster, second.turn_id)
    contents = [(m.role, m.content) for m in store.messages.list(conv.id)]
    assert contents == [
        (MessageRole.USER, "this must survive"),
        (MessageRole.AGENT, "echo: this must survive"),
        (MessageRole.USER, "still there?"),
        (MessageRole.AGENT, "echo: still there?"),
    ]


async def test_reconnect_by_seq_replays_exactly_what_was_missed(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    conv = make_conversation(store, client_id, agent)

    async def durable_events(after: int, until_turns: int) -> list[dict]:
        seen: list[dict] = []
        completed = 0
        async for event in conversations().stream_events(conv.id, after):
            if event["seq"] is None:
                continue
            seen.append(event)
            completed += event["type"] == "turn.completed"
            if completed >= until_turns:
                return seen
        return seen

    first = await post(conv.id, "one", "u")
    await _completed(ray_cluster, first.turn_id)
    part1 = await asyncio.wait_for(durable_events(0, 1), 30)
    last_seen = part1[-1]["seq"]

    # While "disconnected", two more turns happen.
    for text in ("two", "three"):
        ack = await post(conv.id, text, "u")
        await _completed(ray_cluster, ack.turn_id)
    part2 = await asyncio.wait_for(durable_events(last_seen, 2), 30)

    seqs = [e["seq"] for e in part1 + part2]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate
    assert seqs[-1] == store.events.last_seq(conv.id)
    replayed = [e["message"]["content"] for e in part2 if e["type"] == "message"]
    assert replayed == ["two", "echo: two", "three", "echo: three"]


async def test_post_message_is_idempotent_by_message_id(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    conv = make_conversation(store, client_id, agent)
    first = await post(conv.id, "once", "u", message_id="msg_fixed_" + conv.id)
    again = await post(conv.id, "once", "u", message_id="msg_fixed_" + conv.id)
    assert first == again
    await _completed(ray_cluster, first.turn_id)
    assert [m.content for m in store.messages.list(conv.id)] == ["once", "echo: once"]
    assert ray.is_initialized()


async def test_a_stream_survives_the_actor_being_killed(ray_cluster: Cluster) -> None:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    conv = make_conversation(store, client_id, agent)
    seen: list[dict] = []
    completed = asyncio.Event()
    subscribed = asyncio.Event()

    async def listen() -> None:
        async for event in conversations().stream_events(conv.id, 0):
            subscribed.set()
            if event["seq"] is not None:
                seen.append(event)
            if event["type"] == "message" and event["message"]["content"] == "echo: after":
                completed.set()
                return

    listener = asyncio.create_task(listen())
    await asyncio.wait_for(subscribed.wait(), 30)
    first = await post(conv.id, "before", "u")
    await _completed(ray_cluster, first.turn_id)
    status = await conversations().status(conv.id)
    os.kill(status["pid"], signal.SIGKILL)
    second = await post(conv.id, "after", "u")
    await asyncio.wait_for(completed.wait(), 60)
    await _completed(ray_cluster, second.turn_id)
    listener.cancel()
    seqs = [e["seq"] for e in seen]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_a_message_reaches_a_new_actor_when_the_one_this_process_knew_is_gone(
    ray_cluster: Cluster,
) -> None:
    """A process calls the actor it reached last without asking the directory; when that actor
    was evicted or killed behind its back, the message still lands, once, with the history."""
    store = ray_cluster.store
    client_id, _ = make_client(store)
    agent = make_agent(store, client_id, scripted_profile(store))
    conv = make_conversation(store, client_id, agent)
    name = f"conversation:{conv.id}"
    ack = await post(conv.id, "one", "u")
    await _completed(ray_cluster, ack.turn_id)

    # Evicted by the directory (not through this process, which still holds the old handle).
    assert await conversations()._directory().evict.remote(conv.id)
    assert name not in _alive_conversation_actors()
    ack = await post(conv.id, "two", "u")
    await _completed(ray_cluster, ack.turn_id)

    # Killed outright: the directory still lists it, this process still holds its handle.
    ray.kill(ray.get_actor(name, namespace="wonder"), no_restart=True)
    ack = await post(conv.id, "three", "u")
    await _completed(ray_cluster, ack.turn_id)

    contents = [m.content for m in store.messages.list(conv.id)]
    assert contents == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]
    seqs = [e.seq for e in store.events.list(conv.id)]
    assert seqs == list(range(1, len(seqs) + 1))
