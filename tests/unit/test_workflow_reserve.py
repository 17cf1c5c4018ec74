"""The coordinator reserve: plain Python, with a fake actor factory."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.workflow_coordinator.reserve import CoordinatorReserve

ENV = {"WONDER_DATA_DIR": "/tmp/x"}


async def start_coordinator(fail: bool) -> bool:
    """Stands for creating a coordinator actor and waiting until it answers ``ready``."""
    await asyncio.sleep(0)
    if fail:
        raise RuntimeError("no worker")
    return True


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_first_take_misses_then_the_reserve_serves_and_refills() -> None:
    created: list[str] = []

    def create(run_id: str) -> Any:
        created.append(run_id)
        return start_coordinator(fail=False)

    reserve = CoordinatorReserve(2, ENV, create)
    assert await reserve.take(ENV) is None  # empty: it starts filling
    await settle()
    first = await reserve.take(ENV)
    assert first == created[0]
    await settle()
    assert (await reserve.stats())["ready"] == 2
    assert len(set(created)) == 3 and all(r.startswith("run_") for r in created)


async def test_other_settings_are_not_served() -> None:
    reserve = CoordinatorReserve(1, ENV, lambda _r: start_coordinator(fail=False))
    await reserve.take(ENV)
    await settle()
    assert await reserve.take({"WONDER_DATA_DIR": "/elsewhere"}) is None
    assert (await reserve.stats())["ready"] == 1


async def test_coordinators_that_fail_to_start_are_not_offered() -> None:
    reserve = CoordinatorReserve(2, ENV, lambda _r: start_coordinator(fail=True))
    await reserve.take(ENV)
    await settle()
    assert await reserve.take(ENV) is None
    assert (await reserve.stats())["misses"] == 2
