"""The relational store's guarantees, on SQLite and PostgreSQL alike (``store_url`` fixture)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from actors.conversation.log import (
    ConversationLog,
    LogOwned,
    Owner,
    PendingEvent,
    PendingWrite,
    WriterFenced,
)
from core.conversations import create_conversation
from core.domain import Message, MessageRole, Turn, UserCaller
from core.ids import new_id, utc_now
from core.store import Store, schema
from core.workspaces import WorkspaceRecord, WorkspaceSpec

WRITERS = 6
COMMITS_PER_WRITER = 15


def _turn(conversation_id: str) -> Turn:
    return Turn(
        id=new_id("turn"),
        conversation_id=conversation_id,
        agent_id=None,
        caller=UserCaller(user_id="u"),
        input="hi",
        created_at=utc_now(),
    )


def _message(conversation_id: str, turn_id: str, seq: int) -> Message:
    return Message(
        id=new_id("msg"),
        conversation_id=conversation_id,
        turn_id=turn_id,
        role=MessageRole.USER,
        author="u",
        content="hi",
        seq=seq,
        created_at=utc_now(),
    )


def test_seq_is_gap_free_under_concurrent_writers(store_url: str, store: Store) -> None:
    """Writers in separate engines (as separate actor processes are) append to one conversation:
    every commit succeeds and the numbers are exactly 1..N, each used once."""
    conversation = create_conversation(store, client_id="c")
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS)

    def writer() -> None:
        own = Store.open(store_url)  # its own engine and connections, like another process
        log = ConversationLog(own, conversation.id, publish=lambda _event: None)
        try:
            start.wait()
            for n in range(COMMITS_PER_WRITER):
                events = [PendingEvent("note", {"n": n}), PendingEvent("note", {"n": n})]
                log.commit(utc_now(), [PendingWrite(events)])
        except BaseException as error:
            errors.append(error)
        finally:
            own.db.dispose()

    threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    seqs = [event.seq for event in store.events.list(conversation.id)]
    assert seqs == list(range(1, 2 + WRITERS * COMMITS_PER_WRITER * 2))


def test_one_writer_at_a_time_by_the_lease(store: Store) -> None:
    """A guest appends while nobody holds the log; an actor's lease refuses guests; a newer
    incarnation's lease fences the former one; a released lease lets guests in again."""
    conversation = create_conversation(store, client_id="c")
    guest = ConversationLog(store, conversation.id, publish=lambda _event: None)
    guest.note(utc_now(), "note", {"by": "guest"})

    first = store.writers.take(conversation.id, "actor:1", utc_now())
    owner = ConversationLog(store, conversation.id, lambda _e: None, Owner(first))
    owner.note(utc_now(), "note", {"by": "first"})
    with pytest.raises(LogOwned):
        guest.note(utc_now(), "note", {"by": "guest"})

    second = store.writers.take(conversation.id, "actor:2", utc_now())
    assert second == first + 1
    with pytest.raises(WriterFenced):
        owner.note(utc_now(), "note", {"by": "first, fenced"})
    assert not store.writers.release(conversation.id, first, utc_now())  # not its to give up
    newer = ConversationLog(store, conversation.id, lambda _e: None, Owner(second))
    newer.note(utc_now(), "note", {"by": "second"})
    assert store.writers.held([conversation.id, "conv_other"]) == {conversation.id}

    assert store.writers.release(conversation.id, second, utc_now())
    with pytest.raises(WriterFenced):
        newer.note(utc_now(), "note", {"by": "second, released"})
    guest.note(utc_now(), "note", {"by": "guest again"})
    assert store.writers.held([conversation.id]) == set()

    writers = [e.payload["by"] for e in store.events.list(conversation.id)[1:]]
    assert writers == ["guest", "first", "second", "guest again"]
    assert [e.seq for e in store.events.list(conversation.id)] == [1, 2, 3, 4, 5]
    assert store.events.last_seqs([conversation.id, "conv_other"]) == {conversation.id: 5}


def test_opening_a_migrated_database_waits_for_no_writer(store_url: str, store: Store) -> None:
    """Every process opens the store (each conversation actor's start): once the database is
    migrated to this schema, opening it only reads, so it does not queue behind a writer."""
    opened: list[Store] = []
    with store.db.begin():  # a writer holds the database (SQLite: its write lock)
        opener = threading.Thread(target=lambda: opened.append(Store.open(store_url)))
        opener.start()
        opener.join(timeout=20)
        assert opened, "opening the store waited for the writer"
    opened[0].db.dispose()


def test_a_failed_transaction_gives_back_its_rows_and_numbers(store: Store) -> None:
    conversation = create_conversation(store, client_id="c")
    log = ConversationLog(store, conversation.id, publish=lambda _event: None)
    turn = _turn(conversation.id)

    def write_then_fail(conn, events):  # type: ignore[no-untyped-def]
        store.turns.insert(turn, conn)
        store.messages.insert(_message(conversation.id, turn.id, events[0].seq), conn)
        raise RuntimeError("the write fails after its rows")

    with pytest.raises(RuntimeError):
        log.commit(utc_now(), [PendingWrite([PendingEvent("turn.started")], write_then_fail)])

    assert store.turns.list(conversation.id) == []
    assert store.messages.list(conversation.id) == []
    assert store.events.last_seq(conversation.id) == 1

    def write(conn, events):  # type: ignore[no-untyped-def]
        store.turns.insert(turn, conn)
        store.messages.insert(_message(conversation.id, turn.id, events[0].seq), conn)

    stored = log.commit(utc_now(), [PendingWrite([PendingEvent("message")], write)])
    assert [event.seq for event in stored] == [2]
    assert [m.seq for m in store.messages.list(conversation.id)] == [2]
    assert [t.id for t in store.turns.list(conversation.id)] == [turn.id]


def test_recent_turn_ids_are_the_newest_oldest_first(store: Store) -> None:
    conversation = create_conversation(store, client_id="c")
    turns = [_turn(conversation.id) for _ in range(5)]
    for turn in turns:
        store.turns.insert(turn)
    ids = sorted(t.id for t in turns)  # the store orders turns by id (time-ordered)
    assert store.turns.recent_ids(conversation.id, 3) == ids[-3:]
    assert store.turns.recent_ids(conversation.id, 10) == ids
    assert store.turns.recent_ids(conversation.id, 3) == [
        t.id for t in store.turns.list(conversation.id, last=3)
    ]
    assert store.turns.recent_ids(create_conversation(store, client_id="c").id, 3) == []


def test_deleting_a_conversation_deletes_the_tree_it_started(store: Store) -> None:
    root = create_conversation(store, client_id="c")
    child = create_conversation(store, client_id="c", started_by_conversation_id=root.id)
    grandchild = create_conversation(store, client_id="c", started_by_conversation_id=child.id)
    other = create_conversation(store, client_id="c")
    for conversation in (root, child, grandchild, other):
        turn = store.turns.insert(_turn(conversation.id))
        store.messages.insert(_message(conversation.id, turn.id, 2))
        store.context.set(conversation.id, "k", {"v": 1})

    deleted = store.delete_conversation_tree(root.id)

    assert sorted(deleted) == sorted([root.id, child.id, grandchild.id])
    with store.db.connect() as conn:
        for table in (schema.conversations, schema.turns, schema.messages, schema.events):
            column = table.c.id if table is schema.conversations else table.c.conversation_id
            remaining = conn.execute(select(func.count()).select_from(table)).scalar_one()
            others = conn.execute(
                select(func.count()).select_from(table).where(column == other.id)
            ).scalar_one()
            assert remaining == others > 0
    assert store.context.get(other.id, "k") == {"v": 1}
    assert store.context.get(child.id, "k") is None


def test_conversation_cursor_pages_through_every_row_once(store: Store) -> None:
    base = utc_now()
    created = [
        create_conversation(store, client_id="c", created_at=base + timedelta(seconds=n // 3))
        for n in range(10)
    ]  # three share each timestamp: the cursor's id part breaks the ties
    create_conversation(store, client_id="someone-else")

    seen: list[str] = []
    cursor = None
    while True:
        page = store.conversations.list("c", limit=4, after=cursor)
        if not page:
            break
        seen += [c.id for c in page]
        last = page[-1]
        cursor = (last.created_at.isoformat(), last.id)

    expected = sorted(created, key=lambda c: (c.created_at, c.id))
    assert seen == [c.id for c in expected]


def test_event_cursor_replays_after_a_seq(store: Store) -> None:
    conversation = create_conversation(store, client_id="c")
    log = ConversationLog(store, conversation.id, publish=lambda _event: None)
    for n in range(5):
        log.note(utc_now(), "note", {"n": n})

    assert [e.seq for e in store.events.list(conversation.id, after_seq=3)] == [4, 5, 6]
    assert [e.seq for e in store.events.list(conversation.id, after_seq=3, limit=2)] == [4, 5]
    assert store.events.list(conversation.id, after_seq=6) == []


def test_workspace_records_are_replaced_by_key(store: Store) -> None:
    """Where each workspace's worktree lives (issue 14): one record per workspace id, replaced
    when its actor moves, listed by project, deleted with its workspace."""
    spec = WorkspaceSpec(
        workspace_id="conv_a",
        client_id="c",
        project_id="proj_1",
        repository="/r",
        branch="wonder/conv-conv_a",
        default_branch="main",
        worktree="/w/conv_a",
        data_dir="/d",
    )
    first = WorkspaceRecord(spec=spec, node_id="n1", node_ip="10.0.0.1", updated_at=utc_now())
    store.workspaces.put(first)
    moved = first.model_copy(update={"node_id": "n2", "node_ip": "10.0.0.2"})
    store.workspaces.put(moved)
    assert store.workspaces.get("conv_a") == moved
    assert store.workspaces.list_for_project("proj_1") == [moved]
    assert store.workspaces.list_for_project("proj_2") == []
    store.workspaces.delete("conv_a")
    assert store.workspaces.get("conv_a") is None
