"""Messages' embeddings, made once per message and embedding model and kept in the store
(``message_embeddings``): what semantic message search and smart routing compare."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from core.domain import Message
from core.memory.embedding import Embedder
from core.message_search import vector_bytes
from core.store import Store

EMBED_BATCH = 64
EMBED_CHARS = 2_000


async def message_vectors(
    store: Store, embedder: Embedder, messages: Sequence[Message]
) -> dict[str, bytes]:
    """Each message's unit vector under ``embedder`` (made and stored for those without one;
    empty messages have none), by message id."""
    model = embedder.model_name
    ids = [m.id for m in messages]
    stored = await asyncio.to_thread(store.message_embeddings.get, ids, model)
    missing = [m for m in messages if m.id not in stored and m.content.strip()]
    for start in range(0, len(missing), EMBED_BATCH):
        chunk = missing[start : start + EMBED_BATCH]
        vectors = await embedder.embed([m.content[:EMBED_CHARS] for m in chunk])
        made: dict[str, dict[str, bytes]] = {}
        for message, vector in zip(chunk, vectors, strict=True):
            raw = vector_bytes(vector)
            made.setdefault(message.conversation_id, {})[message.id] = raw
            stored[message.id] = raw
        for written_in, rows in made.items():  # kept with the conversation that wrote them
            await asyncio.to_thread(store.message_embeddings.put, written_in, model, rows)
    return stored
