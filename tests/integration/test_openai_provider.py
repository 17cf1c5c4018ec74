"""The ``openai`` provider's failure path on the real cluster: a model endpoint nobody listens
on is retried with the LLM policy's backoff, each retry announced, then the turn fails saying it
may be retried. (Its success path runs against the project's own ``/llm/v1`` endpoint in
tests/e2e/test_local_model.py.)"""

from __future__ import annotations

import socket
from typing import Any

from core.domain import ModelProfile
from core.ids import new_id, utc_now
from tests.conftest import Cluster
from tests.factories import make_agent, make_client, make_conversation
from tests.integration.access import conversations


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed when the block ends: nothing listens


async def test_an_unreachable_endpoint_is_retried_then_fails_the_turn_retriably(
    ray_cluster: Cluster,
) -> None:
    store = ray_cluster.store
    profile = store.model_profiles.put(
        ModelProfile(
            id=f"openai-{new_id().lower()}",
            provider="openai",
            model="default",
            base_url=f"http://127.0.0.1:{closed_port()}/v1",
        ),
        utc_now(),
    )
    client_id, _key = make_client(store)
    conv = make_conversation(store, client_id, make_agent(store, client_id, profile))
    port = conversations()
    stream = port.stream_events(conv.id, 0)
    assert (await anext(stream))["type"] == "conversation_started"
    ack = await port.post_message(conv.id, "hello?", "user-1")
    seen: list[dict[str, Any]] = []
    async for event in stream:
        seen.append(event)
        if event["type"] == "turn.failed":
            break
    await stream.aclose()
    assert [e["attempt"] for e in seen if e["type"] == "llm.retry"] == [1, 2]  # 3 attempts
    failed = seen[-1]
    assert failed["turn_id"] == ack.turn_id and "unreachable" in failed["reason"]
    assert failed["error"]["retriable"] is True
    assert store.turns.get(ack.turn_id).failure_reason == failed["reason"]
