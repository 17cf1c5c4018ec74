"""A cron trigger made by a user fires as that user (``core.triggers``, ``actors/scheduler.py``):
it posts while the user may write where it lands, and once the user's access is revoked its
firing fails and posts nothing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from actors.scheduler import CronScheduler, SchedulerPorts
from core.access import Level
from core.conversations import create_conversation
from core.errors import NotFound
from core.ids import utc_now
from core.ports import MessageAck
from core.routes import Route
from core.store import Store
from core.triggers import create_trigger
from core.turn_quotas import StoredQuotas
from tests.factories import make_client


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


class RecordedPosts:
    """The conversations port as the scheduler uses it: posts are recorded, not run."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str]] = []

    async def post_message(
        self, conversation_id: str, content: str, *_: object, **__: object
    ) -> MessageAck:
        self.posts.append((conversation_id, content))
        n = len(self.posts)
        return MessageAck(
            conversation_id=conversation_id, turn_id=f"turn_{n}", message_id=f"msg_{n}", seq=n
        )


def test_a_users_trigger_posts_as_that_user_and_stops_when_revoked(store: Store) -> None:
    client_id, _ = make_client(store)
    conversation = create_conversation(store, client_id=client_id)
    now = utc_now()
    store.members.grant(conversation.id, "ann", Level.WRITER, now)
    assert store.session_labels.create(client_id, "daily", conversation.id, now.isoformat())
    route = Route(kind="session", target="daily")
    with pytest.raises(NotFound, match="route: session daily not found"):  # bob is no member
        create_trigger(store, client_id, "* * * * *", "tick", route, "bob")
    trigger = create_trigger(store, client_id, "* * * * *", "tick", route, "ann")
    assert trigger.user_id == "ann"
    posts = RecordedPosts()
    ports = SchedulerPorts(store=store, conversations=posts, quotas=StoredQuotas(store))  # type: ignore[arg-type]
    scheduler = CronScheduler(lambda: ports, tick_s=60)  # no loop here: the test drives ticks

    def fire_now() -> str | None:
        due = store.triggers.get(trigger.id).model_copy(
            update={"next_due": utc_now() - timedelta(seconds=1)}
        )
        store.triggers.save(due)
        [fired] = asyncio.run(scheduler.tick())
        return fired.error

    assert fire_now() is None and posts.posts == [(conversation.id, "tick")]
    store.members.revoke(conversation.id, "ann")
    assert fire_now() == "session daily not found"  # as ann, who may no longer post there
    assert len(posts.posts) == 1
