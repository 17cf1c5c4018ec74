"""Storage of messages' routing decisions and permissions (``core.route_model``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select

from core.route_model import MessageRoute
from core.store import schema
from core.store.database import Database


class MessageRouteOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, record: MessageRoute) -> MessageRoute:
        t = schema.message_routes
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.message_id == record.message_id))
            conn.execute(
                insert(t).values(
                    message_id=record.message_id,
                    conversation_id=record.conversation_id,
                    data=record.model_dump_json(),
                )
            )
        return record

    def for_messages(self, message_ids: Sequence[str]) -> dict[str, MessageRoute]:
        t = schema.message_routes
        found: dict[str, MessageRoute] = {}
        with self.db.connect() as conn:
            for start in range(0, len(message_ids), 500):
                chunk = list(message_ids[start : start + 500])
                rows = conn.execute(select(t.c.data).where(t.c.message_id.in_(chunk))).scalars()
                for raw in rows:
                    record = MessageRoute.model_validate_json(raw)
                    found[record.message_id] = record
        return found

    def for_turn(self, turn_id: str) -> MessageRoute | None:
        """The record of the message that started ``turn_id``, if it has one."""
        t, m = schema.message_routes, schema.messages
        started_it = select(m.c.id).where(m.c.turn_id == turn_id)
        query = select(t.c.data).where(t.c.message_id.in_(started_it))
        with self.db.connect() as conn:
            found = conn.execute(query.limit(1)).scalar_one_or_none()
        return None if found is None else MessageRoute.model_validate_json(found)
