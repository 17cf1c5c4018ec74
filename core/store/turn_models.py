"""Storage of per-turn model overrides and the model each such turn used (core.model_override)."""

from __future__ import annotations

from sqlalchemy import delete, insert, or_, select

from core.store import schema
from core.store.database import Database
from core.turn_model import TurnModel


class TurnModelOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, record: TurnModel) -> TurnModel:
        t = schema.turn_models
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.message_id == record.message_id))
            conn.execute(
                insert(t).values(
                    message_id=record.message_id,
                    turn_id=record.turn_id,
                    data=record.model_dump_json(),
                )
            )
        return record

    def for_turn(self, turn_id: str) -> TurnModel | None:
        """The override of the message that started ``turn_id`` (or recorded for it), if any."""
        t, m = schema.turn_models, schema.messages
        started_it = select(m.c.id).where(m.c.turn_id == turn_id)
        query = select(t.c.data).where(or_(t.c.turn_id == turn_id, t.c.message_id.in_(started_it)))
        with self.db.connect() as conn:
            found = conn.execute(query.limit(1)).scalar_one_or_none()
        return None if found is None else TurnModel.model_validate_json(found)

    def for_turns(self, turn_ids: list[str]) -> dict[str, TurnModel]:
        """Recorded overrides of these turns, by turn id."""
        t = schema.turn_models
        with self.db.connect() as conn:
            rows = conn.execute(select(t.c.data).where(t.c.turn_id.in_(turn_ids))).scalars()
            found = [TurnModel.model_validate_json(r) for r in rows]
        return {r.turn_id: r for r in found if r.turn_id is not None}
