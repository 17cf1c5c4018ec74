"""``ConversationAffinityRouter`` on real Ray Serve, with a two-replica stand-in deployment (no
vLLM: the policy is what is tested here; tests/e2e/test_llm_cluster.py runs it with vLLM)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from serving.llm_config import ROUTER_CLASS
from serving.llm_routing import in_flight, last_route
from tests.conftest import Cluster, async_wait_for
from tests.integration.test_gateway import unique


def replica_echo_app(limit: int) -> Any:
    from ray import serve

    class WhichReplica:  # defined here so that Serve pickles it by value
        async def __call__(self, hold_s: float = 0.0) -> str:
            await asyncio.sleep(hold_s)
            return str(serve.get_replica_context().replica_id.unique_id)

    return serve.deployment(
        WhichReplica,
        num_replicas=2,
        max_ongoing_requests=8,
        ray_actor_options={"num_cpus": 0},
        request_router_config={
            "request_router_class": ROUTER_CLASS,
            "request_router_kwargs": {"max_ongoing_for_affinity": limit},
        },
    ).bind()


@pytest.fixture(scope="module")
def app(ray_cluster: Cluster, serve_port: int) -> Iterator[Any]:
    from ray import serve

    name = unique("routing")
    handle = serve.run(replica_echo_app(limit=1), name=name, route_prefix=None)
    try:
        yield handle
    finally:
        serve.delete(name)


async def test_each_session_stays_on_one_replica_and_sessions_spread(app: Any) -> None:
    sessions = [f"conversation-{n}" for n in range(8)]
    seen: dict[str, set[str]] = {s: set() for s in sessions}
    for _ in range(4):
        for session in sessions:
            replica = await app.options(session_id=session).remote()
            seen[session].add(replica)
            # At the limit of 1 in flight, the next request waits until this completion reached
            # the router (else it would rightly move to the least loaded replica).
            await async_wait_for(lambda replica=replica: in_flight(replica) == 0)
    assert all(len(replicas) == 1 for replicas in seen.values()), seen
    assert {s: last_route(s) for s in sessions} == {s: next(iter(r)) for s, r in seen.items()}
    anonymous = {await app.remote() for _ in range(24)}  # no session: least loaded, ties shuffled
    assert len(anonymous) == 2


async def test_a_busy_replica_hands_the_conversation_to_the_least_loaded(app: Any) -> None:
    handle = app.options(session_id="busy-conversation")
    home = await handle.remote()
    await async_wait_for(lambda: in_flight(home) == 0)  # its completion reached the router
    held = handle.remote(hold_s=3.0)
    await async_wait_for(lambda: in_flight(home) == 1)  # in flight on `home`: at the limit of 1
    moved = await handle.remote()
    assert moved != home and last_route("busy-conversation") == moved
    assert await held == home
    await async_wait_for(lambda: in_flight(home) == 0 and in_flight(moved) == 0)
    assert await handle.remote() == moved  # the new replica is now the conversation's
