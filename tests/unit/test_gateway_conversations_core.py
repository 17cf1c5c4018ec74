"""``core.conversations.create_conversation``: the row and its seq-1 event, atomically."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.conversations import CONVERSATION_STARTED, create_conversation
from core.domain import Participant
from core.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def test_writes_row_and_started_event(store: Store) -> None:
    conv = create_conversation(store, client_id="c1", agent_id="agent_1", title="hi")
    assert store.conversations.get(conv.id, client_id="c1") == conv
    events = store.events.list(conv.id)
    assert [(e.seq, e.type) for e in events] == [(1, CONVERSATION_STARTED)]
    assert events[0].payload["agent_id"] == "agent_1"
    assert conv.participants == [Participant(type="agent", id="agent_1")]


def test_child_conversation_keeps_its_parent(store: Store) -> None:
    parent = create_conversation(store, client_id="c1")
    child = create_conversation(
        store,
        client_id="c1",
        started_by_conversation_id=parent.id,
        started_by_message_id="m1",
        depth=1,
    )
    assert child.participants == []
    assert store.conversations.list("c1", parent_id=parent.id) == [child]
    assert store.events.list(child.id)[0].payload["started_by_conversation_id"] == parent.id


def test_duplicate_id_writes_nothing(store: Store) -> None:
    conv = create_conversation(store, client_id="c1", conversation_id="conv_x")
    with pytest.raises(Exception, match="UNIQUE"):
        create_conversation(store, client_id="c2", conversation_id="conv_x")
    assert store.conversations.get("conv_x") == conv
    assert len(store.events.list("conv_x")) == 1
