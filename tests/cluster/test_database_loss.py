"""Losing the database mid-turn: the tier's PostgreSQL server stops (``pg_ctl -m immediate``, its
connections cut, as a crash) while a turn's model call runs, and starts again. The turn fails with
a retriable error (``UNAVAILABLE``) once the store takes that, a message sent during the outage is
refused with a retriable error, nothing acknowledged is lost, and the conversation answers its
next message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from cluster.stream_client import ResumingStream
from core.domain import MessageRole, TurnStatus
from tests.cluster.conftest import MultiNode
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile

pytestmark = pytest.mark.timeout(600)
MODEL_S = 3.0  # the model call the outage cuts across
REPLY = "re: slow one"


@pytest.fixture
def database_back(multinode: MultiNode) -> Iterator[None]:
    """Whatever the test does, the tier's database runs again after it."""
    yield
    multinode.database.start()


async def test_a_turn_cut_by_a_database_outage_fails_retriably_and_nothing_acked_is_lost(
    multinode: MultiNode, database_back: None
) -> None:
    store = multinode.store
    client_id, key = make_client(store)
    script = [
        {"match": "slow", "delay_s": MODEL_S, "reply": "re: {{last_user}}"},
        {"match": "", "reply": "re: {{last_user}}"},
    ]
    agent = make_agent(store, client_id, scripted_profile(store, script))
    conv = make_conversation(store, client_id, agent).id
    assert multinode.drive("converse", conversations=[conv], text="first")["statuses"] == [
        "completed"
    ]
    multinode.drive("serve", replicas=2)  # the gateway (kept if it is deployed already)
    stream = ResumingStream(multinode.gateway_url, key, conv)
    await stream.open()
    slow = await stream.send("slow one")
    seen = await stream.wait_acked(slow, 60)
    await async_wait_for(
        lambda: store.turns.get(str(seen.turn_id)).started_at is not None, 60, 0.05
    )

    multinode.database.halt()  # mid-turn: the model is still answering
    # The model's whole reply reaches the subscriber (tokens are not stored); writing it cannot.
    tokens: list[str] = []
    while "".join(tokens) != REPLY:
        frame = await stream.receive(30)
        if frame.get("type") == "token" and frame.get("turn_id") == seen.turn_id:
            tokens.append(str(frame["delta"]))
    # A message sent now is refused, retriably: it was not acknowledged, so it may be sent again.
    await stream.send_raw(json.dumps({"type": "message", "content": "lost", "id": "x"}))
    refused = await stream.receive(60)
    while refused.get("type") != "error":
        refused = await stream.receive(60)
    assert refused["error"]["code"] == "UNAVAILABLE" and refused["error"]["retriable"] is True

    await asyncio.to_thread(multinode.database.start)
    try:
        ended = await stream.wait_turn(slow, 120)
    except TimeoutError as exc:
        stored = store.turns.get(str(seen.turn_id))
        events = [e.type for e in store.events.list(conv)]
        raise AssertionError((stored.status, stored.failure_reason, events, stream.breaks)) from exc
    assert ended.ended == "turn.failed"
    failed = store.turns.get(str(seen.turn_id))
    assert failed.status is TurnStatus.FAILED and failed.failure_code == "UNAVAILABLE"
    assert failed.failure_reason and failed.failure_reason.startswith("store unavailable")

    again = await stream.send("again")
    assert (await stream.wait_turn(again, 120)).ended == "turn.completed"
    await stream.close()
    messages = [(m.role, m.content) for m in store.messages.list(conv)]
    assert [c for r, c in messages if r is MessageRole.USER] == ["first", "slow one", "again"]
    assert [c for r, c in messages if r is MessageRole.AGENT] == ["re: first", "re: again"]
    seqs = [e.seq for e in store.events.list(conv)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert stream.seqs == list(range(1, stream.last_seq + 1))
