"""Subscriptions without the actor (``core.event_feed``) and the events hub (``core.event_hub``):
ordering by seq, what a subscriber missed read from the store, tokens in flight, the hub's
long polls, backlogs and restarts. A real SQLite store; no Ray (the hub is plain Python here)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from actors.conversation.log import ConversationLog, PendingEvent, PendingWrite
from core.conversations import create_conversation
from core.domain import Turn, TurnStatus, UserCaller
from core.event_feed import EventFeed
from core.event_hub import EventHub
from core.event_order import PartialReplies, SeqOrder, coalesce, token_frame
from core.forks import fork_conversation
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


class HubSource:
    """A process's ``FeedSource`` over an in-process ``EventHub`` (what ``cluster`` does over
    Ray), with a listener id; ``pump`` moves one poll's frames into the feed."""

    def __init__(self, hub: EventHub, store: Store, listener_id: str = "l1") -> None:
        self.hub = hub
        self.id = listener_id
        self.feed = EventFeed(store, self)
        self.watches: list[str] = []
        self.unwatches: list[str] = []

    async def watch(self, conversation_id: str) -> list[JsonObject]:
        self.watches.append(conversation_id)
        return (await self.hub.watch(self.id, conversation_id)).tokens

    def unwatch(self, conversation_id: str) -> None:
        self.unwatches.append(conversation_id)
        asyncio.get_running_loop().create_task(self.hub.unwatch(self.id, conversation_id))

    async def pump(self, timeout_s: float = 0.01) -> None:
        delivery = await self.hub.next(self.id, timeout_s)
        if not delivery.known:
            await self.feed.rewatch()
        elif delivery.lost:
            self.feed.resync()
        for conversation_id, frames in delivery.frames:
            self.feed.deliver(conversation_id, frames)


class Writer:
    """A writer of a conversation's log that publishes to the hub (or drops what it is told)."""

    def __init__(self, store: Store, hub: EventHub, conversation_id: str) -> None:
        self.hub = hub
        self.conversation_id = conversation_id
        self.dropping = False
        self.holding = False  # publishes still on their way, sent by ``release``
        self.held: list[JsonObject] = []
        self.log = ConversationLog(store, conversation_id, self._publish)

    def _publish(self, frame: JsonObject) -> None:
        if self.holding:
            self.held.append(frame)
        elif not self.dropping:
            asyncio.get_running_loop().create_task(
                self.hub.publish([(self.conversation_id, [frame])])
            )

    async def release(self) -> None:
        self.holding, held, self.held = False, self.held, []
        await self.hub.publish([(self.conversation_id, held)])

    def write(self, *types: str) -> None:
        self.log.commit(utc_now(), [PendingWrite([PendingEvent(t, {}) for t in types])])

    def token(self, turn_id: str, delta: str) -> None:
        self._publish(token_frame(self.conversation_id, turn_id, delta))


async def take(stream: AsyncIterator[JsonObject], n: int, source: HubSource) -> list[JsonObject]:
    """The next ``n`` frames, pumping the hub while waiting."""
    got: list[JsonObject] = []
    pending = asyncio.ensure_future(anext(stream))
    while len(got) < n:
        done, _ = await asyncio.wait({pending}, timeout=0.02)
        if pending in done:
            got.append(pending.result())
            if len(got) < n:
                pending = asyncio.ensure_future(anext(stream))
        else:
            await source.pump()
    return got


def kinds(frames: Sequence[JsonObject]) -> list[tuple[Any, Any]]:
    return [(f.get("seq"), f.get("type")) for f in frames]


async def test_replay_then_live_each_durable_event_once_in_order(store: Store) -> None:
    hub = EventHub()
    source = HubSource(hub, store)
    conv = create_conversation(store, client_id="c").id
    writer = Writer(store, hub, conv)
    writer.write("turn.started", "message")
    stream = source.feed.subscribe(conv, 1, marker=True)
    first = await take(stream, 3, source)
    assert kinds(first) == [(None, "subscribed"), (2, "turn.started"), (3, "message")]
    writer.write("move", "message")
    writer.token("turn_1", "hel")
    writer.token("turn_1", "lo")
    got = await take(stream, 3, source)
    assert kinds(got)[:2] == [(4, "move"), (5, "message")]
    assert got[2]["type"] == "token"  # the two deltas, as they came or merged
    assert source.watches == [conv]


async def subscribed(store: Store) -> tuple[HubSource, Writer, AsyncIterator[JsonObject]]:
    """A new conversation, its writer, and a subscription that has had its first event."""
    hub = EventHub()
    source = HubSource(hub, store)
    conv = create_conversation(store, client_id="c").id
    writer = Writer(store, hub, conv)
    stream = source.feed.subscribe(conv, 0)
    assert kinds(await take(stream, 1, source)) == [(1, "conversation_started")]
    return source, writer, stream


async def test_what_a_subscriber_did_not_hear_of_is_read_from_the_store(store: Store) -> None:
    source, writer, stream = await subscribed(store)
    writer.dropping = True  # a writer that died right after its commits: nobody heard of them
    writer.write("turn.started", "message")
    writer.dropping = False
    writer.write("turn.completed")
    assert kinds(await take(stream, 3, source)) == [
        (2, "turn.started"),
        (3, "message"),
        (4, "turn.completed"),
    ]
    writer.dropping = True
    writer.write("note")  # the last event lost: no later one shows the gap
    await source.pump()
    await source.feed.poll_store()  # the store is ahead: a publish may still be on its way
    await source.feed.poll_store()  # the fallback: still not heard of a poll later
    assert kinds(await take(stream, 1, source)) == [(5, "note")]


async def test_the_store_poll_does_not_overtake_a_publish_on_its_way(store: Store) -> None:
    """A reply's tokens and its commit, published a few ms after the commit: a store poll in
    between must not hand the subscriber the turn's end before the reply's tokens."""
    source, writer, stream = await subscribed(store)
    await source.feed.poll_store()
    writer.holding = True
    writer.token("turn_1", "hello")
    writer.write("message", "turn.completed")
    await source.feed.poll_store()  # the store holds seq 3; its publish is still on its way
    await writer.release()
    got = await take(stream, 3, source)
    assert kinds(got) == [(None, "token"), (2, "message"), (3, "turn.completed")]
    assert got[0]["delta"] == "hello"


async def test_duplicates_and_late_events_are_dropped(store: Store) -> None:
    hub = EventHub()
    source = HubSource(hub, store)
    conv = create_conversation(store, client_id="c").id
    writer = Writer(store, hub, conv)
    writer.write("a", "b")
    stream = source.feed.subscribe(conv, 0)
    assert [s for s, _t in kinds(await take(stream, 3, source))] == [1, 2, 3]
    stale = [{"seq": 2, "type": "b", "conversation_id": conv}]
    await hub.publish([(conv, stale)])  # heard of twice (a new incarnation announcing its tail)
    writer.write("c")
    assert kinds(await take(stream, 1, source)) == [(4, "c")]


async def test_a_full_inbox_reads_the_store_instead(store: Store) -> None:
    hub = EventHub()
    source = HubSource(hub, store)
    source.feed.inbox_limit = 3
    conv = create_conversation(store, client_id="c").id
    writer = Writer(store, hub, conv)
    stream = source.feed.subscribe(conv, 0)
    assert kinds(await take(stream, 1, source)) == [(1, "conversation_started")]
    for _ in range(4):
        writer.write("note")  # no one reads meanwhile: the inbox overflows
    for _ in range(3):
        await source.pump()
    got = await take(stream, 4, source)
    assert [s for s, _t in kinds(got)] == [2, 3, 4, 5]


async def test_a_forks_replay_includes_what_it_inherits(store: Store) -> None:
    hub = EventHub()
    source = HubSource(hub, store)
    source_conv = create_conversation(store, client_id="c")
    turn = Turn(
        id=new_id("turn"),
        conversation_id=source_conv.id,
        agent_id=None,
        caller=UserCaller(user_id="u"),
        input="hi",
        status=TurnStatus.COMPLETED,
        created_at=utc_now(),
    )
    started = PendingEvent("turn.started", {"turn_id": turn.id})
    write = PendingWrite([started], lambda conn, _e: store.turns.insert(turn, conn))
    ConversationLog(store, source_conv.id, lambda _f: None).commit(utc_now(), [write])
    fork = fork_conversation(store, source_conv, turn.id)
    stream = source.feed.subscribe(fork.id, 0)
    inherited = [e.seq for e in store.events.list(source_conv.id)]
    got = await take(stream, len(inherited) + 1, source)
    assert [f["seq"] for f in got] == [*inherited, inherited[-1] + 1]
    assert all(f["conversation_id"] == fork.id for f in got)
    assert got[0]["inherited_from"] == source_conv.id and "inherited_from" not in got[-1]


async def test_a_subscriber_mid_reply_gets_the_tokens_so_far_then_the_rest(store: Store) -> None:
    hub = EventHub()
    conv = create_conversation(store, client_id="c").id
    writer = Writer(store, hub, conv)
    writer.token("turn_1", "Hel")
    writer.token("turn_1", "lo")
    await asyncio.sleep(0)
    source = HubSource(hub, store)
    stream = source.feed.subscribe(conv, 0)
    got = await take(stream, 2, source)
    assert got[1] == token_frame(conv, "turn_1", "Hello")
    second = source.feed.subscribe(conv, 0)  # same process: the feed's own copy of the reply
    assert (await take(second, 2, source))[1] == token_frame(conv, "turn_1", "Hello")
    writer.token("turn_1", "!")
    assert (await take(stream, 1, source))[0]["delta"] == "!"


async def test_the_last_subscriber_leaving_unwatches(store: Store) -> None:
    hub = EventHub()
    source = HubSource(hub, store)
    conv = create_conversation(store, client_id="c").id
    first, second = source.feed.subscribe(conv, 0), source.feed.subscribe(conv, 0)
    await take(first, 1, source)
    await take(second, 1, source)
    assert source.watches == [conv]
    await first.aclose()  # type: ignore[attr-defined]
    assert source.unwatches == []
    await second.aclose()  # type: ignore[attr-defined]
    assert source.unwatches == [conv] and source.feed.watched() == []


async def test_the_hub_hands_each_listener_its_conversations_only(store: Store) -> None:
    hub = EventHub()
    await hub.watch("l1", "c1")
    await hub.watch("l2", "c2")
    waiting = asyncio.ensure_future(hub.next("l1", 5.0))
    await asyncio.sleep(0)
    assert not waiting.done()  # a long poll
    await hub.publish([("c2", [{"seq": 1}]), ("c1", [{"seq": 7}])])
    delivery = await asyncio.wait_for(waiting, 1)
    assert delivery.frames == [("c1", [{"seq": 7}])] and delivery.known and not delivery.lost
    assert (await hub.next("l2", 0.01)).frames == [("c2", [{"seq": 1}])]
    await hub.unwatch("l1", "c1")
    await hub.publish([("c1", [{"seq": 8}])])
    assert (await hub.next("l1", 0.01)).frames == []


async def test_a_listener_that_falls_behind_or_is_unknown_is_told(store: Store) -> None:
    clock = [0.0]
    hub = EventHub(clock=lambda: clock[0], backlog=2)
    await hub.watch("l1", "c1")
    await hub.publish([("c1", [{"seq": 1}, {"seq": 2}, {"seq": 3}])])
    behind = await hub.next("l1", 0.01)
    assert behind.lost and behind.frames == []  # read the store instead
    assert (await hub.next("unknown", 0.01)).known is False  # a restarted hub knows nobody
    clock[0] = 1000.0  # l1 stopped polling long ago: forgotten at the next sweep
    await hub.publish([("c1", [{"seq": 4}])])
    assert (await hub.next("l1", 0.01)).known is False


def test_seq_order_and_token_merging() -> None:
    order = SeqOrder(last_seq=2)
    assert order.is_old({"seq": 2}) and not order.is_old({"seq": 3})
    assert not order.is_old({"seq": None})
    assert order.missing_before({"seq": 5}) == range(3, 5)
    assert not order.missing_before({"seq": 3})
    order.saw({"seq": 5})
    order.saw({"seq": None})
    assert order.last_seq == 5
    merged = coalesce(
        [
            {"type": "token", "turn_id": "t1", "delta": "a"},
            {"type": "token", "turn_id": "t1", "delta": "b"},
            {"type": "token", "turn_id": "t2", "delta": "x"},
            {"type": "message", "seq": 5},
            {"type": "token", "turn_id": "t2", "delta": "y"},
        ]
    )
    assert [f.get("delta") for f in merged] == ["ab", "x", None, "y"]


def test_partial_replies_end_with_their_words_stored() -> None:
    replies = PartialReplies()
    replies.observe("c", token_frame("c", "t1", "Hel"))
    replies.observe("c", token_frame("c", "t2", "x"))
    replies.observe("c", token_frame("c", "t1", "lo"))
    assert replies.so_far("c") == [token_frame("c", "t1", "Hello"), token_frame("c", "t2", "x")]
    replies.observe("c", {"seq": 9, "type": "message", "message": {"turn_id": "t1"}})
    replies.observe("c", {"seq": None, "type": "llm.retry", "turn_id": "t2"})
    assert replies.so_far("c") == []
