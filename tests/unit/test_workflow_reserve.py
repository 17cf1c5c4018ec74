"""The coordinator reserve: plain Python, with a fake actor factory."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.workflow_coordinator.reserve import CoordinatorReserve

ENV = {"WONDER_DATA_DIR": "/tmp/x"}


class FakeCoordinator:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.ready = self

    def remote(self) -> Any:
        async def answer() -> bool:
            await asyncio.sleep(0)
            if self.fail:
                raise RuntimeError("no worker")
            return True

        return answer()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_first_take_misses_then_the_reserve_serves_and_refills() -> None:
    created: list[str] = []

    def create(run_id: str) -> FakeCoordinator:
        created.append(run_id)
        return FakeCoordinator(fail=False)

    reserve = CoordinatorReserve(2, ENV, create)
    assert await reserve.take(ENV) is None  # empty: it starts filling
    await settle()
    first = await reserve.take(ENV)
    assert first == created[0]
    await settle()
    assert (await reserve.stats())["ready"] == 2
    assert len(set(created)) == 3 and all(r.startswith("run_") for r in created)


async def test_other_settings_are_not_served() -> None:
    reserve = CoordinatorReserve(1, ENV, lambda _r: FakeCoordinator(fail=False))
    await reserve.take(ENV)
    await settle()
    assert await reserve.take({"WONDER_DATA_DIR": "/elsewhere"}) is None
    assert (await reserve.stats())["ready"] == 1


async def test_coordinators_that_fail_to_start_are_not_offered() -> None:
    reserve = CoordinatorReserve(2, ENV, lambda _r: FakeCoordinator(fail=True))
    await reserve.take(ENV)
    await settle()
    assert await reserve.take(ENV) is None
    assert (await reserve.stats())["misses"] == 2
