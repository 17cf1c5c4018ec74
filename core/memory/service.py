"""``MemoryService``: write, search, read and delete an agent's memories.

The one place that embeds, applies the write policy (a fact on a known subject updates instead of
duplicating) and ranks search results. Storage calls are blocking LanceDB/object-store calls, so
they run in a worker thread and never stall an actor's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from core.errors import Conflict, InvalidInput, NotFound
from core.ids import new_id, utc_now
from core.memory.embedding import Embedder
from core.memory.filters import MemoryFilter
from core.memory.lance import sql_in
from core.memory.operations import MemoryOps, Nearest
from core.memory.planning import (
    DEFAULT_SIMILARITY_THRESHOLD,
    UPDATABLE_TYPES,
    edited_memory,
    update_target,
    updated_metadata,
)
from core.memory.ranking import (
    Candidate,
    candidate_pool_size,
    cosine_relevance,
    fuse_relevance,
    normalize_text_scores,
    rank,
    relevance_from_cosine_distance,
)
from core.memory.records import (
    MAX_CONTENT_BYTES,
    MAX_SEARCH_K,
    Memory,
    MemoryEdit,
    MemoryHit,
    NewMemory,
    RankWeights,
    SearchMode,
    WriteOutcome,
)

Dedupe = Literal["auto", "none"]
_STAMPS = {"updated_at", "embedding_model"}
MAX_K = MAX_SEARCH_K


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: str
    k: int = 5
    mode: SearchMode = SearchMode.VECTOR
    types: tuple[str, ...] = ()
    weights: RankWeights = field(default_factory=RankWeights)
    include_consolidated: bool = False
    text_weight: float = 0.5


class MemoryService:
    """Memories of every agent, through one store and one embedder."""

    def __init__(
        self,
        ops: MemoryOps,
        embedder: Embedder,
        *,
        clock: Callable[[], datetime] = utc_now,
        make_id: Callable[[], str] = lambda: new_id("mem"),
    ) -> None:
        self.ops = ops
        self.embedder = embedder
        self.clock = clock
        self.make_id = make_id

    # ------------------------------------------------------------------ write

    async def write(
        self,
        agent_id: str,
        memories: Sequence[NewMemory],
        *,
        dedupe: Dedupe = "auto",
        similarity_threshold: float = DEFAULT_SIMILARITY_THRESHOLD,
    ) -> list[WriteOutcome]:
        """Embed and store ``memories``; facts/decisions on a known subject update the old one."""
        for memory in memories:
            if len(memory.content.encode()) > MAX_CONTENT_BYTES:
                raise InvalidInput(f"memory content over {MAX_CONTENT_BYTES} bytes")
        vectors = await self.embedder.embed([m.content for m in memories])
        outcomes: list[WriteOutcome] = []
        to_insert: list[tuple[Memory, list[float]]] = []
        for new, vector in zip(memories, vectors, strict=True):
            target = None
            if dedupe == "auto" and new.type in UPDATABLE_TYPES:
                # Earlier memories of this batch must be visible to the lookup.
                await asyncio.to_thread(self.ops.insert, to_insert)
                to_insert = []
                target = await asyncio.to_thread(
                    self._update_target, agent_id, new, vector, similarity_threshold
                )
            if target is not None:
                outcomes.append(await asyncio.to_thread(self._update, target, new, vector))
                continue
            created = await asyncio.to_thread(self._new_memory, agent_id, new)
            to_insert.append((created, vector))
            outcomes.append(WriteOutcome(memory=created, action="created"))
        await asyncio.to_thread(self.ops.insert, to_insert)
        return outcomes

    def _new_memory(self, agent_id: str, new: NewMemory) -> Memory:
        now = self.clock()
        memory = Memory(
            id=self.make_id(),
            agent_id=agent_id,
            type=new.type,
            significance=new.significance,
            metadata=new.metadata,
            subject=new.subject,
            embedding_model=self.embedder.model_name,
            created_at=now,
            updated_at=now,
        )
        return self.ops.externalise(memory, new.content)

    def _update_target(
        self, agent_id: str, new: NewMemory, vector: list[float], threshold: float
    ) -> Memory | None:
        same_type = (new.type,)
        same_subject: list[Memory] = []
        if new.subject:
            where = MemoryFilter(agent_id, types=same_type, subject=new.subject)
            same_subject = self.ops.recent(where, limit=10)
        nearest: tuple[Memory, float] | None = None
        if not same_subject:
            found = self.ops.vector_search(MemoryFilter(agent_id, types=same_type), vector, 1)
            if found:
                nearest = (found[0].memory, relevance_from_cosine_distance(found[0].raw_score))
        return update_target(new.type, same_subject, nearest, threshold)

    def _update(self, old: Memory, new: NewMemory, vector: list[float]) -> WriteOutcome:
        previous = old.model_copy(update={"content": self.ops.content(old)})
        updated = old.model_copy(
            update={
                "significance": new.significance,
                "metadata": updated_metadata(previous, new.metadata),
                "subject": new.subject or old.subject,
                "embedding_model": self.embedder.model_name,
                "updated_at": self.clock(),
            }
        )
        updated = self.ops.externalise(updated, new.content)
        if self.ops.replace([(updated, vector)]) == 0:
            # Deleted meanwhile: keep the new content as a memory of its own.
            self.ops.insert([(updated, vector)])
            return WriteOutcome(memory=updated, action="created")
        if previous.content_ref and not updated.content_ref:
            self.ops.objects.delete(previous.content_ref)
        return WriteOutcome(memory=updated, action="updated")

    async def edit(self, agent_id: str, memory_id: str, edit: MemoryEdit) -> Memory:
        """Correct a stored memory (the fields ``edit`` gives); a changed content is embedded
        again, so the vector always matches the text. Returns the memory with its full content.
        A memory folded into a summary is not edited (its summary is)."""
        if edit.content is not None and len(edit.content.encode()) > MAX_CONTENT_BYTES:
            raise InvalidInput(f"memory content over {MAX_CONTENT_BYTES} bytes")
        old = await self.read(agent_id, memory_id)
        if old.consolidated_into is not None:
            raise Conflict(
                f"memory {memory_id} is folded into {old.consolidated_into}: edit that one"
            )
        vector: list[float] | None = None
        if edit.content is not None and edit.content != old.content:
            vector = (await self.embedder.embed([edit.content]))[0]
        return await asyncio.to_thread(self._edit, old, edit, vector)

    def _edit(self, old: Memory, edit: MemoryEdit, vector: list[float] | None) -> Memory:
        model = old.embedding_model if vector is None else self.embedder.model_name
        if vector is None:
            vector = self.ops.stored_vector(old.agent_id, old.id)
        edited = edited_memory(old, edit, self.clock(), model)
        if edited.model_dump(exclude=_STAMPS) == old.model_dump(exclude=_STAMPS):
            return old  # nothing to change
        stored = self.ops.externalise(edited, edited.content)
        if self.ops.replace([(stored, vector)]) == 0:
            if stored.content_ref:
                self.ops.objects.delete(stored.content_ref)
            raise NotFound(f"memory {old.id} not found for agent {old.agent_id}")
        if old.content_ref and not stored.content_ref:
            self.ops.objects.delete(old.content_ref)
        return edited

    # ------------------------------------------------------------------ search

    async def search(self, agent_id: str, request: SearchRequest) -> list[MemoryHit]:
        """The ``k`` best memories for ``request.query``, ranked by relevance and significance."""
        if not request.query.strip():
            raise InvalidInput("memory search needs a query")
        if not 1 <= request.k <= MAX_K:
            raise InvalidInput(f"k must be within 1..{MAX_K}")
        where = MemoryFilter(agent_id, request.types, request.include_consolidated)
        pool = candidate_pool_size(request.k)
        vector: list[float] | None = None
        if request.mode in (SearchMode.VECTOR, SearchMode.HYBRID):
            vector = (await self.embedder.embed([request.query]))[0]
        return await asyncio.to_thread(self._search, where, request, vector, pool)

    def _search(
        self, where: MemoryFilter, request: SearchRequest, vector: list[float] | None, pool: int
    ) -> list[MemoryHit]:
        # Candidates are ranked on id, significance and relevance only; rows are read for the
        # ``k`` winners (full-text hits come with their rows).
        nearest: dict[str, Nearest] = {}
        loaded: dict[str, Memory] = {}
        significance: dict[str, float] = {}
        vector_rel: dict[str, float] = {}
        text_rel: dict[str, float] = {}
        if vector is not None:
            for near in self.ops.nearest(where, vector, pool):
                nearest[near.memory_id] = near
                significance[near.memory_id] = near.significance
                vector_rel[near.memory_id] = relevance_from_cosine_distance(near.distance)
        if request.mode in (SearchMode.FTS, SearchMode.HYBRID):
            text_hits = self.ops.text_search(where, request.query, pool)
            for hit in text_hits:
                loaded[hit.memory.id] = hit.memory
                significance[hit.memory.id] = hit.memory.significance
            text_rel = normalize_text_scores({h.memory.id: h.raw_score for h in text_hits})
        if request.mode is SearchMode.VECTOR:
            relevance = vector_rel
        elif request.mode is SearchMode.FTS:
            relevance = text_rel
        else:
            assert vector is not None
            missing = [i for i in text_rel if i not in vector_rel]
            for memory_id, other in self.ops.vectors(where.agent_id, missing).items():
                vector_rel[memory_id] = cosine_relevance(vector, other)
            relevance = fuse_relevance(vector_rel, text_rel, request.text_weight)
        candidates = [Candidate(i, relevance.get(i, 0.0), sig) for i, sig in significance.items()]
        ranked = rank(candidates, request.k, request.weights)
        unread = [nearest[r.memory_id] for r in ranked if r.memory_id not in loaded]
        loaded.update(self.ops.take(where.agent_id, unread))
        return [
            MemoryHit(memory=loaded[r.memory_id], relevance=r.relevance, score=r.score)
            for r in ranked
            if r.memory_id in loaded  # deleted between the search and the read
        ]

    # ------------------------------------------------------------------ read, list, delete

    async def read(self, agent_id: str, memory_id: str) -> Memory:
        """One memory with its full content (fetched from the object store when large)."""

        def load() -> Memory:
            memory = self.ops.get(agent_id, memory_id)
            return memory.model_copy(update={"content": self.ops.content(memory)})

        return await asyncio.to_thread(load)

    async def resolve_contents(self, memories: Sequence[Memory]) -> list[Memory]:
        """``memories`` with large contents fetched (search results keep only a reference)."""

        def load() -> list[Memory]:
            return [
                m
                if m.content_ref is None
                else m.model_copy(update={"content": self.ops.content(m)})
                for m in memories
            ]

        return await asyncio.to_thread(load)

    async def recent(
        self,
        agent_id: str,
        *,
        types: Sequence[str] = (),
        limit: int = 50,
        before_id: str | None = None,
        include_consolidated: bool = False,
    ) -> list[Memory]:
        where = MemoryFilter(agent_id, tuple(types), include_consolidated)
        return await asyncio.to_thread(self.ops.recent, where, limit, before_id)

    async def delete(self, agent_id: str, memory_id: str) -> Memory:
        return await asyncio.to_thread(self.ops.delete, agent_id, memory_id)

    async def count(self, agent_ids: Sequence[str]) -> int:
        """How many memories the agents hold (quotas count a client's memories with it)."""
        if not agent_ids:
            return 0
        where = sql_in("agent_id", agent_ids)
        return int(await asyncio.to_thread(self.ops.table.table.count_rows, where))
