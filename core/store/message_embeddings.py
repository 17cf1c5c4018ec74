"""Storage of message embeddings (``core.message_search``): made once per message and model."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select

from core.store import schema
from core.store.database import Database


class MessageEmbeddingOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, message_ids: Sequence[str], model: str) -> dict[str, bytes]:
        """The stored vectors of ``message_ids`` made by ``model``, by message id."""
        t = schema.message_embeddings
        found: dict[str, bytes] = {}
        with self.db.connect() as conn:
            for start in range(0, len(message_ids), 500):
                chunk = list(message_ids[start : start + 500])
                query = select(t.c.message_id, t.c.vector).where(
                    t.c.message_id.in_(chunk), t.c.model == model
                )
                found.update((row[0], bytes(row[1])) for row in conn.execute(query))
        return found

    def put(self, conversation_id: str, model: str, vectors: dict[str, bytes]) -> None:
        """Store vectors of messages written in ``conversation_id`` (replacing another model's)."""
        if not vectors:
            return
        t = schema.message_embeddings
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.message_id.in_(list(vectors))))
            conn.execute(
                insert(t),
                [
                    {
                        "message_id": message_id,
                        "conversation_id": conversation_id,
                        "model": model,
                        "vector": vector,
                    }
                    for message_id, vector in vectors.items()
                ],
            )
