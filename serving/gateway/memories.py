"""Memories of an agent the calling client owns: list, write, search, read, edit, delete (§7, §8).

``/v1/agents/{agent_id}/memories`` — another client's agent is a 404, like a missing one. Writes
and searches embed through the Embedder deployment (``serving.embedder``); reads return the full
content, fetched from the object store when it is over 4 KB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

if TYPE_CHECKING:
    from core.memory.service import MemoryService

from core.memory.records import (
    MAX_SEARCH_K,
    Memory,
    MemoryEdit,
    NewMemory,
    RankWeights,
    SearchMode,
)
from core.strict import StrictScalars
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, Guard
from serving.gateway.context import GatewayContext
from serving.gateway.protocol import Deleted, Items, Page

router = APIRouter(prefix="/v1/agents/{agent_id}/memories", tags=["memories"])

MEMORY_ID_FORM = "mem_[A-Za-z0-9]{1,60}"  # what ``MemoryService`` makes: ``new_id("mem")``
MEMORY_ID = f"^{MEMORY_ID_FORM}$"
MemoryId = Annotated[str, Path(pattern=MEMORY_ID, description="A memory id (mem_…)")]


class MemoryIdConvertor(Convertor[str]):
    """Routes only memory ids to ``/{memory_id}``: ``/memories/search`` is its own resource (its
    ``Allow`` is ``POST``), never a memory called "search"."""

    regex = MEMORY_ID_FORM

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("memory_id", MemoryIdConvertor())
Limit = Annotated[int, Query(ge=1, le=200, description="Page size")]
Cursor = Annotated[
    str | None,
    Query(pattern=MEMORY_ID, description="next_cursor of the last page (newest first)"),
]


class MemoryCreate(StrictScalars, NewMemory):
    """A memory to store. ``dedupe: auto`` lets a fact or decision on a known subject (or nearly
    identical to an existing one) update it instead of adding a duplicate."""

    dedupe: Literal["auto", "none"] = "auto"


class MemoryEditIn(StrictScalars, MemoryEdit):
    """``MemoryEdit`` as a client sends it (numbers only as numbers)."""


class MemoryWritten(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["created", "updated"]
    memory: Memory


class RankWeightsIn(StrictScalars, RankWeights):
    """``RankWeights`` as a client sends them (numbers only as numbers)."""


class MemorySearch(StrictScalars):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000)
    k: int = Field(5, ge=1, le=MAX_SEARCH_K)
    mode: SearchMode = SearchMode.VECTOR
    types: list[str] = Field(default_factory=list, max_length=20)
    weights: RankWeightsIn = Field(default_factory=RankWeightsIn)
    include_consolidated: bool = False
    text_weight: float = Field(0.5, ge=0.0, le=1.0, description="Full-text share of hybrid")


class MemoryHitOut(Memory):
    relevance: float = Field(description="0..1: how well the memory matches the query")
    score: float = Field(
        description="weights.relevance * relevance + weights.significance * "
        "significance; results are ordered by it"
    )


async def owned_agent_memories(
    context: GatewayContext, client_id: str, agent_id: str
) -> MemoryService:
    """The memory service, once ``agent_id`` is known to belong to ``client_id`` (404 otherwise)."""
    await run_in_threadpool(context.store.agents.get, agent_id, client_id=client_id)
    return await context.memory.service()


@router.get("", response_model=Page[Memory], summary="List an agent's memories, newest first")
async def list_memories(
    agent_id: str,
    context: Context,
    client_id: ClientId,
    types: Annotated[list[str] | None, Query(max_length=20)] = None,
    include_consolidated: bool = False,
    limit: Limit = 50,
    after_cursor: Cursor = None,
) -> Page[Memory]:
    service = await owned_agent_memories(context, client_id, agent_id)
    found = await service.recent(
        agent_id,
        types=types or (),
        limit=limit + 1,
        before_id=after_cursor,
        include_consolidated=include_consolidated,
    )
    items = found[:limit]
    return Page[Memory](items=items, next_cursor=items[-1].id if len(found) > limit else None)


@router.post("", status_code=201, response_model=MemoryWritten, summary="Store a memory")
async def write_memory(
    agent_id: str, body: MemoryCreate, context: Context, client_id: ClientId, guard: Guard
) -> MemoryWritten:
    service = await owned_agent_memories(context, client_id, agent_id)
    allowed = guard.memories_allowed(client_id)
    if allowed is not None:
        agents = await run_in_threadpool(context.store.agents.list_for_client, client_id)
        guard.admit_memory(await service.count([a.id for a in agents]), allowed)
    new = NewMemory.model_validate(body.model_dump(exclude={"dedupe"}))
    (outcome,) = await service.write(agent_id, [new], dedupe=body.dedupe)
    memory = outcome.memory
    if memory.content_ref:
        memory = memory.model_copy(update={"content": new.content})
    return MemoryWritten(action=outcome.action, memory=memory)


@router.post("/search", response_model=Items[MemoryHitOut], summary="Search an agent's memories")
async def search_memories(
    agent_id: str, body: MemorySearch, context: Context, client_id: ClientId
) -> Items[MemoryHitOut]:
    from core.memory.service import SearchRequest

    service = await owned_agent_memories(context, client_id, agent_id)
    request = SearchRequest(
        query=body.query,
        k=body.k,
        mode=body.mode,
        types=tuple(body.types),
        weights=body.weights,
        include_consolidated=body.include_consolidated,
        text_weight=body.text_weight,
    )
    hits = await service.search(agent_id, request)
    full = await service.resolve_contents([h.memory for h in hits])
    return Items[MemoryHitOut](
        items=[
            MemoryHitOut(**memory.model_dump(), relevance=hit.relevance, score=hit.score)
            for hit, memory in zip(hits, full, strict=True)
        ]
    )


@router.get(
    "/{memory_id:memory_id}", response_model=Memory, summary="Read one memory, full content"
)
async def read_memory(
    agent_id: str, memory_id: MemoryId, context: Context, client_id: ClientId
) -> Memory:
    service = await owned_agent_memories(context, client_id, agent_id)
    return await service.read(agent_id, memory_id)


@router.patch(
    "/{memory_id:memory_id}", response_model=Memory, summary="Edit one memory (re-embedded)"
)
async def edit_memory(
    agent_id: str,
    memory_id: MemoryId,
    body: MemoryEditIn,
    context: Context,
    client_id: ClientId,
    audit: Audit,
) -> Memory:
    service = await owned_agent_memories(context, client_id, agent_id)
    edit = MemoryEdit.model_validate(body.model_dump(include=body.model_fields_set))
    edited = await service.edit(agent_id, memory_id, edit)
    details = {"agent_id": agent_id, "fields": sorted(edit.model_fields_set)}
    await run_in_threadpool(audit.record, "memory.edit", f"memory:{edited.id}", details)
    return edited


@router.delete("/{memory_id:memory_id}", response_model=Deleted, summary="Delete one memory")
async def delete_memory(
    agent_id: str, memory_id: MemoryId, context: Context, client_id: ClientId, audit: Audit
) -> Deleted:
    service = await owned_agent_memories(context, client_id, agent_id)
    deleted = await service.delete(agent_id, memory_id)
    details = {"agent_id": agent_id, "type": deleted.type, "subject": deleted.subject}
    await run_in_threadpool(audit.record, "memory.delete", f"memory:{deleted.id}", details)
    return Deleted(deleted=[deleted.id])
