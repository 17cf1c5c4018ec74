"""Open WebSockets do not pin conversation actors, and the resident cap stays live.

Six conversations, each with its WebSocket open through the gateway the whole time, under a
resident cap of two; two rounds of one message per socket. Every message is answered on its
socket, no socket breaks or sees a durable ``seq`` twice or misses one, and the directory never
holds more than the cap (conversations with listeners are evicted between their turns).

With every resident actor busy, a message is still acknowledged, its wait is in its events
(``turn.waiting``) and it is answered once room frees; a message that cannot be acknowledged
without its actor gets a 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from cluster.stream_client import ResumingStream
from tests.conftest import Cluster
from tests.integration import test_gateway_stream as gateway_stream
from tests.integration.access import conversations
from tests.integration.test_gateway_stream import scripted_agent

# The gateway over real HTTP, a client key and a REST client (fixtures of the stream tests).
gateway_url, key, api = gateway_stream.gateway_url, gateway_stream.key, gateway_stream.api

pytestmark = pytest.mark.timeout(900)

CAP = 2
SLOW_S = 20.0
SOCKETS = 6
ROUNDS = 2
TURN_TIMEOUT_S = 240.0


@pytest.fixture
async def cap_of_two(ray_cluster: Cluster) -> AsyncIterator[int]:
    before = await conversations().directory_stats()
    await conversations().configure_directory(max_resident=CAP)
    try:
        yield CAP
    finally:
        await conversations().configure_directory(max_resident=before["max_resident"])


async def test_more_open_sockets_than_the_cap_are_all_answered_exactly(
    cap_of_two: int, gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "echo: {{last_user}}"}])
    convs = [
        api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
        for _ in range(SOCKETS)
    ]
    streams = [ResumingStream(gateway_url, key, conv, max_reconnects=0) for conv in convs]
    for stream in streams:  # each subscribed before the next opens: all six stay open
        await stream.open(timeout_s=TURN_TIMEOUT_S)
    evictions_before = (await conversations().directory_stats())["evictions"]
    try:
        for round_number in range(ROUNDS):
            frames = [await s.send(f"round {round_number} to {s.conversation_id}") for s in streams]
            ended = await asyncio.gather(
                *(s.wait_turn(f, TURN_TIMEOUT_S) for s, f in zip(streams, frames, strict=True))
            )
            assert [seen.ended for seen in ended] == ["turn.completed"] * SOCKETS
            stats = await conversations().directory_stats()
            assert stats["resident"] <= cap_of_two, stats
    finally:
        for stream in streams:
            await stream.close()

    for stream in streams:
        assert stream.breaks == [], f"{stream.conversation_id}: the socket broke"
        assert stream.gaps_and_duplicates() == (0, 0), stream.seqs
    # Listeners do not keep actors: the six conversations took turns at two resident actors.
    assert (await conversations().directory_stats())["evictions"] - evictions_before >= SOCKETS


@pytest.fixture
async def cap_of_one(ray_cluster: Cluster) -> AsyncIterator[int]:
    before = await conversations().directory_stats()
    await conversations().configure_directory(max_resident=1)
    try:
        yield 1
    finally:
        await conversations().configure_directory(max_resident=before["max_resident"])


async def test_at_a_full_cap_a_message_waits_visibly_and_is_answered_when_room_frees(
    cap_of_one: int, gateway_url: str, api: httpx.Client, key: str
) -> None:
    slow = scripted_agent(api, [{"reply": "done at last", "delay_s": SLOW_S}])
    fast = scripted_agent(api, [{"reply": "echo: {{last_user}}"}])
    busy = api.post("/v1/conversations", json={"agent_id": slow}).json()["id"]
    waiting = api.post("/v1/conversations", json={"agent_id": fast}).json()["id"]
    stream = ResumingStream(gateway_url, key, waiting, max_reconnects=0)
    await stream.open(timeout_s=TURN_TIMEOUT_S)
    try:
        taken = api.post(f"/v1/conversations/{busy}/messages", json={"content": "take your time"})
        assert taken.status_code == 202, taken.text
        started = False
        for _ in range(600):  # the busy conversation's actor runs its turn: the cap is full
            status = await conversations().status(busy)
            if status["active_turns"]:
                started = True
                break
            await asyncio.sleep(0.1)
        assert started

        frame = await stream.send("are you there?")
        seen = await stream.wait_acked(frame, 60)  # acknowledged at once, in the store
        assert seen.turn_id is not None

        refused = api.post(f"/v1/conversations/{waiting}/messages", json={"content": "again"})
        assert refused.status_code == 503, refused.text  # its turn waits: this one needs an actor
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["retriable"] is True

        answered = await stream.wait_turn(frame, SLOW_S + TURN_TIMEOUT_S)
        assert answered.ended == "turn.completed"
    finally:
        await stream.close()
    events = [e for e in conversations_store(api, waiting) if e.get("turn_id") == seen.turn_id]
    kinds = [e["type"] for e in events]
    assert "turn.waiting" in kinds and kinds.index("turn.waiting") < kinds.index("turn.completed")
    assert stream.gaps_and_duplicates() == (0, 0) and stream.breaks == []
    texts = [m["content"] for m in api.get(f"/v1/conversations/{waiting}/messages").json()["items"]]
    assert texts == ["are you there?", "echo: are you there?"]


def conversations_store(api: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's stored events, as the REST API pages them."""
    page = api.get(f"/v1/conversations/{conversation_id}/events", params={"limit": 1000})
    assert page.status_code == 200, page.text
    items: list[dict[str, Any]] = page.json()["items"]
    return items
