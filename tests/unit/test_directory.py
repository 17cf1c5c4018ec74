"""The conversation directory's rules (residency cap, eviction, bounded activations) over a fake
``ActorHost``: actors whose readiness and idleness the test decides. The Ray host is exercised by
the integration tier."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field

import pytest

from actors.conversation.directory import AtCapacity, ConversationDirectory
from core.errors import Unavailable


@dataclass(eq=False)
class FakeActor:
    conversation_id: str
    started: asyncio.Event = field(default_factory=asyncio.Event)
    idle: bool = True
    killed: bool = False


class FakeHost:
    """``ActorHost`` whose actors start when the test says so."""

    def __init__(self) -> None:
        self.created: list[FakeActor] = []
        self.held: list[set[str]] = []  # what the directory said it held, at each creation

    def create(self, conversation_id: str, held: Collection[str]) -> FakeActor:
        actor = FakeActor(conversation_id)
        self.created.append(actor)
        self.held.append(set(held))
        return actor

    async def ready(self, handle: FakeActor) -> None:
        await handle.started.wait()

    async def try_hibernate(self, handle: FakeActor) -> bool:
        return handle.idle

    async def shut_down(self, handle: FakeActor, reason: str) -> None:
        handle.idle = True

    def kill(self, handle: FakeActor) -> None:
        handle.killed = True

    def start(self, conversation_id: str) -> None:
        next(a for a in self.created if a.conversation_id == conversation_id).started.set()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def start_everything(host: FakeHost) -> None:
    """Let every actor created so far (and those created meanwhile) start."""
    for _ in range(10):
        for actor in host.created:
            actor.started.set()
        await settle()


async def test_a_resident_conversation_gets_its_handle_again() -> None:
    host = FakeHost()
    directory = ConversationDirectory(8, host)
    first = await directory.activate("c1")
    assert await directory.activate("c1") is first
    assert len(host.created) == 1


async def test_a_conversation_is_ready_once_its_actor_has_started() -> None:
    host = FakeHost()
    directory = ConversationDirectory(8, host)
    assert not directory.is_ready("c1")  # asking starts nothing
    assert host.created == []
    await directory.activate("c1")
    assert not directory.is_ready("c1")  # created, still starting
    host.start("c1")
    await settle()
    assert directory.is_ready("c1")
    assert await directory.evict("c1")
    assert not directory.is_ready("c1")


async def test_at_most_max_starting_actors_start_at_once_first_come_first_served() -> None:
    host = FakeHost()
    directory = ConversationDirectory(100, host, max_starting=2)
    calls = [asyncio.create_task(directory.activate(f"c{n}")) for n in range(5)]
    await settle()
    assert [a.conversation_id for a in host.created] == ["c0", "c1"]
    assert directory.stats()["starting"] == 2 and directory.stats()["waiting"] == 3
    host.start("c1")
    await settle()
    assert [a.conversation_id for a in host.created] == ["c0", "c1", "c2"]
    for n in (0, 2, 3, 4):
        await settle()
        host.start(f"c{n}")
    handles = await asyncio.gather(*calls)
    assert [h.conversation_id for h in handles] == [f"c{n}" for n in range(5)]
    await settle()
    assert directory.stats()["starting"] == 0 and directory.stats()["activations"] == 5


async def test_a_replacement_does_not_wait_behind_starting_actors() -> None:
    """After a failed call (Ray restarting the actor: its node was lost) the caller gets the
    handle again at once, though the start slot is taken by an actor still starting."""
    host = FakeHost()
    directory = ConversationDirectory(8, host, max_starting=1)
    await directory.activate("c1")  # holds the only start slot until c1 has started
    second = asyncio.create_task(directory.activate("c2"))
    await settle()
    assert not second.done()  # waits for the slot
    again = await asyncio.wait_for(directory.activate("c1", replace=True), 1)
    assert again is host.created[-1] and again.conversation_id == "c1"
    assert not second.done()
    await start_everything(host)
    await second


async def test_a_full_start_queue_refuses_at_once_with_a_retriable_error() -> None:
    host = FakeHost()
    directory = ConversationDirectory(100, host, max_starting=1, max_waiting=2)
    waiting = [asyncio.create_task(directory.activate(f"c{n}")) for n in range(3)]
    await settle()
    with pytest.raises(Unavailable) as refused:
        await directory.activate("c9")
    assert refused.value.retriable and "waiting to start" in refused.value.message
    assert directory.stats()["refused"] == 1
    for n in range(3):
        host.start(f"c{n}")
        await settle()
    await asyncio.gather(*waiting)


async def test_an_actor_that_fails_to_start_gives_its_slot_back() -> None:
    class FailingHost(FakeHost):
        async def ready(self, handle: FakeActor) -> None:
            raise RuntimeError("worker died")

    directory = ConversationDirectory(100, FailingHost(), max_starting=1)
    await directory.activate("c1")
    await settle()
    await asyncio.wait_for(directory.activate("c2"), 1)  # not stuck behind c1's slot


async def test_at_the_cap_the_least_recently_used_idle_actor_is_evicted() -> None:
    host = FakeHost()
    directory = ConversationDirectory(2, host)
    one = await directory.activate("c1")
    two = await directory.activate("c2")
    two.idle = False
    await directory.activate("c1")  # c1 is now the most recently used, but c2 is busy
    await directory.activate("c3")
    assert one.killed and not two.killed
    assert directory.stats()["conversations"] == ["c2", "c3"]


async def test_the_host_is_told_which_actors_the_directory_holds() -> None:
    host = FakeHost()
    directory = ConversationDirectory(2, host, reserve_size=1)
    directory.refill()
    await start_everything(host)
    reserved = host.created[0].conversation_id
    await directory.activate("c1")
    await start_everything(host)
    await directory.activate("c2")
    await start_everything(host)
    assert host.held == [set(), {reserved}, {reserved, "c1"}]
    await directory.activate("c3")  # at the cap: c1, idle and least recently used, is evicted
    assert host.held[-1] == {reserved, "c2"}


async def test_the_reserve_hands_out_ids_of_started_actors_and_refills() -> None:
    host = FakeHost()
    directory = ConversationDirectory(10, host, reserve_size=2)
    directory.refill()
    await start_everything(host)
    assert directory.stats()["reserved"] == 2 and len(host.created) == 2
    taken = await directory.take_reserved()
    assert taken == host.created[0].conversation_id
    assert await directory.activate(taken) is host.created[0]  # resident: no new actor
    await start_everything(host)
    assert directory.stats()["reserved"] == 2 and directory.stats()["reserved_taken"] == 1
    assert len(host.created) == 3


async def test_an_empty_reserve_gives_no_id() -> None:
    directory = ConversationDirectory(10, FakeHost(), reserve_size=0)
    assert await directory.take_reserved() is None


async def test_at_the_cap_the_reserve_is_not_used() -> None:
    host = FakeHost()
    directory = ConversationDirectory(1, host, reserve_size=1)
    directory.refill()
    await start_everything(host)
    busy = await directory.activate("c1")
    busy.idle = False
    assert await asyncio.wait_for(directory.take_reserved(), 1) is None  # never waits for room
    assert directory.stats()["reserved"] == 1


# --------------------------------------------------------------------------- liveness at the cap


async def test_at_the_cap_the_least_recently_active_idle_actor_goes_first() -> None:
    """Activity, not listeners, orders eviction: an actor whose turn ended long ago goes before
    one whose turn just ended, and an actor that said it is idle before one that did not."""
    host = FakeHost()
    directory = ConversationDirectory(3, host)
    one, two, three = [await directory.activate(f"c{n}") for n in (1, 2, 3)]
    await start_everything(host)
    directory.note_idle("c2")  # c2's turn ended first
    directory.note_idle("c1")  # then c1's
    await directory.activate("c4")
    assert two.killed and not one.killed and not three.killed
    await start_everything(host)
    await directory.activate("c5")  # c1 said it is idle; c3 did not (it is idle all the same)
    assert one.killed and not three.killed
    assert directory.stats()["conversations"] == ["c3", "c4", "c5"]


async def test_with_every_resident_actor_busy_the_caller_gets_a_retriable_answer() -> None:
    host = FakeHost()
    directory = ConversationDirectory(1, host, room_grace_s=0.05)
    busy = await directory.activate("c1")
    busy.idle = False
    await start_everything(host)
    with pytest.raises(AtCapacity) as refused:
        await asyncio.wait_for(directory.activate("c2"), 5)  # never waits without bound
    assert refused.value.retriable and refused.value.retry_after_s is not None
    assert refused.value.retry_after_s >= 1
    stats = directory.stats()
    assert stats["at_capacity"] == 1 and stats["blocked"] and stats["waiting"] == 0
    assert [a.conversation_id for a in host.created] == ["c1"]  # withdrawn: nothing started


async def test_a_kept_activation_starts_as_soon_as_room_frees() -> None:
    """A message acknowledged in the store asks for its activation with ``keep``: at the cap
    the caller is told (and records the wait), and the actor starts once one is idle."""
    host = FakeHost()
    directory = ConversationDirectory(1, host, room_grace_s=0.05)
    busy = await directory.activate("c1")
    busy.idle = False
    await start_everything(host)
    with pytest.raises(AtCapacity):
        await directory.activate("c2", keep=True)
    assert [a.conversation_id for a in host.created] == ["c1"]
    busy.idle = True
    directory.note_idle("c1")  # its turn ended
    for _ in range(50):
        await settle()
        if len(host.created) == 2:
            break
    assert busy.killed and [a.conversation_id for a in host.created] == ["c1", "c2"]
    assert directory.stats()["conversations"] == ["c2"] and not directory.stats()["blocked"]
    assert await directory.activate("c2") is host.created[1]


async def test_an_activation_waits_at_most_its_bound() -> None:
    host = FakeHost()
    directory = ConversationDirectory(10, host, max_starting=1, activation_wait_s=0.1)
    await directory.activate("c1")  # holds the only start slot: it never becomes ready
    with pytest.raises(Unavailable) as waited:
        await asyncio.wait_for(directory.activate("c2"), 5)
    assert "waited" in waited.value.message and waited.value.retry_after_s is not None
    await start_everything(host)
    assert await directory.activate("c3")  # the bound withdrew c2; the queue goes on
