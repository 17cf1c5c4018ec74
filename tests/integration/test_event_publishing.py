"""Publishing conversation events to a real events hub actor (``cluster.conversation_events``):
what one event-loop turn publishes travels in one call, and a reply's token deltas wait
(``token_linger_s``) to travel with the durable event that follows them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from cluster.conversation_events import RayEventPublisher
from core.event_hub import EventHub, HubDelivery
from core.event_order import token_frame
from core.jsontypes import JsonObject
from tests.conftest import Cluster

CONV = "conv_publishing"


def durable(seq: int, kind: str = "move") -> JsonObject:
    return {"seq": seq, "type": kind, "conversation_id": CONV, "turn_id": "turn_1"}


def token(delta: str) -> JsonObject:
    return token_frame(CONV, "turn_1", delta)


async def hub_watching() -> Any:
    """A hub of this test's own (not the cluster's named one), one listener watching ``CONV``."""
    hub = ray.remote(EventHub).options(num_cpus=0).remote()
    await hub.watch.remote("listener", CONV)
    return hub


async def deliveries(hub: Any, frames: int) -> list[HubDelivery]:
    """The hub's answers to the listener's polls until ``frames`` frames came."""
    got: list[HubDelivery] = []
    while sum(len(batch) for d in got for _c, batch in d.frames) < frames:
        got.append(await hub.next.remote("listener", 30.0))
    return got


def types(delivery: HubDelivery) -> list[str]:
    return [str(frame["type"]) for _c, batch in delivery.frames for frame in batch]


@pytest.mark.timeout(120)
async def test_token_deltas_travel_with_the_durable_event_after_them(
    ray_cluster: Cluster,
) -> None:
    hub = await hub_watching()
    publisher = RayEventPublisher(lambda: hub, token_linger_s=30.0)  # only the commit sends them
    publisher.publish(CONV, [token("Hel")])
    await asyncio.sleep(0.05)  # event-loop turns pass: the deltas wait
    publisher.publish(CONV, [token("lo")])
    await asyncio.sleep(0.05)
    publisher.publish(CONV, [durable(3), durable(4, "message")])
    (delivery,) = await deliveries(hub, 4)
    assert types(delivery) == ["token", "token", "move", "message"]  # in publish order
    assert len(delivery.frames) == 3  # one publish call carried the three batches
    assert await hub.stats.remote() == {
        "epoch": delivery.epoch,
        "listeners": 1,
        "watched_conversations": 1,
        "published": 4,
    }
    ray.kill(hub)


@pytest.mark.timeout(120)
async def test_deltas_with_nothing_after_them_go_when_their_linger_is_over(
    ray_cluster: Cluster,
) -> None:
    hub = await hub_watching()
    publisher = RayEventPublisher(lambda: hub, token_linger_s=0.2)
    publisher.publish(CONV, [token("thinking")])
    (delivery,) = await deliveries(hub, 1)  # no durable event came: the linger sent it
    assert types(delivery) == ["token"]
    ray.kill(hub)


@pytest.mark.timeout(120)
async def test_without_a_linger_each_event_loop_turn_publishes_its_own(
    ray_cluster: Cluster,
) -> None:
    hub = await hub_watching()
    publisher = RayEventPublisher(lambda: hub, token_linger_s=0.0)
    publisher.publish(CONV, [token("Hel")])
    publisher.publish(CONV, [token("lo")])  # the same turn of the loop: one call
    first = await deliveries(hub, 2)
    publisher.publish(CONV, [durable(3)])
    second = await deliveries(hub, 1)
    assert [types(d) for d in first + second] == [["token", "token"], ["move"]]
    ray.kill(hub)
