"""Open WebSockets do not pin conversation actors: more open chats than the resident cap, each
answered, each stream exact by ``seq``.

Six conversations, each with its WebSocket open through the gateway the whole time, under a
resident cap of two; two rounds of one message per socket. Every message is answered on its
socket, no socket breaks or sees a durable ``seq`` twice or misses one, and the directory never
holds more than the cap (conversations with listeners are evicted between their turns).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

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
