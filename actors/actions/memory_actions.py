"""``memory.write`` / ``memory.search`` / ``memory.read`` / ``memory.delete`` (ARCHITECTURE.md §7).

Each action works on one agent's memories: the agent the task runs for (``ctx.agent_id``). A task
may name ``agent_id`` only when it is that same agent, or, with no agent in the context, one its
client owns. The per-process ``MemoryService`` (``ctx.services.memory``) embeds through the
Embedder deployment when it is up.

Also here: ``assemble_context``, the ``python`` callable the default ``context_assembly`` task ends
with (memories found + pending work + tool specs → ``system_context``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from actors.actions import ActionContext, JsonObject, action
from core.callables import library_callable
from core.errors import ErrorCode, InvalidInput, NonRetryableError, NotFound, PermissionDenied
from core.llm.recording import link_turn
from core.memory import (
    Memory,
    MemoryHit,
    NewMemory,
    RankWeights,
    SearchMode,
    SearchRequest,
)
from core.memory.context import assemble_context as render_context
from core.quotas import Limit, check_batch
from core.tracing import Span, SpanKind, capture_content, clipped, span

if TYPE_CHECKING:
    from core.memory.service import MemoryService

NEW_MEMORY_KEYS = ("type", "content", "significance", "metadata", "subject")
MAX_WRITE_BATCH = 64


def memory_agent(params: JsonObject, ctx: ActionContext) -> str:
    """Whose memories this action touches (never another client's agent)."""
    named = params.get("agent_id")
    if ctx.agent_id:
        if named and named != ctx.agent_id:
            raise PermissionDenied("a task may only use the memories of the agent it runs for")
        return ctx.agent_id
    if not named:
        raise InvalidInput("memory actions need an agent (the task's agent or params.agent_id)")
    if ctx.client_id:
        try:
            ctx.services.store.agents.get(str(named), client_id=ctx.client_id)
        except NotFound:
            raise PermissionDenied(f"agent {named} is not yours") from None
    return str(named)


def memory_json(memory: Memory) -> JsonObject:
    return memory.model_dump(mode="json")


def hit_json(hit: MemoryHit) -> JsonObject:
    return {
        **memory_json(hit.memory),
        "relevance": round(hit.relevance, 6),
        "score": round(hit.score, 6),
    }


def _new_memories(params: JsonObject, ctx: ActionContext) -> list[NewMemory]:
    raw = params.get("memories")
    items: list[Any] = raw if isinstance(raw, list) else [params] if raw is None else []
    if raw is not None and not isinstance(raw, list):
        raise InvalidInput("memory.write: memories must be a list")
    if len(items) > MAX_WRITE_BATCH:
        raise InvalidInput(f"memory.write takes at most {MAX_WRITE_BATCH} memories at once")
    source = {
        k: v for k, v in (("conversation_id", ctx.conversation_id), ("turn_id", ctx.turn_id)) if v
    }
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise InvalidInput("memory.write: each memory must be an object")
        fields = {k: item[k] for k in NEW_MEMORY_KEYS if item.get(k) is not None}
        if "type" not in fields and params.get("type"):
            fields["type"] = params["type"]
        metadata = dict(fields.get("metadata") or {})
        if source:
            metadata.setdefault("source", source)
        fields["metadata"] = metadata
        try:
            out.append(NewMemory.model_validate(fields))
        except ValidationError as exc:
            raise InvalidInput(f"memory.write: invalid memory: {exc.errors()[0]['msg']}") from exc
    return out


@action("memory.write")
async def memory_write(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """Store one memory (``content``, ``type``, ``significance``, ``subject``, ``metadata``) or a
    list (``memories``). Facts and decisions on a known subject, or nearly identical to an
    existing one (``similarity_threshold``), update it; ``dedupe: none`` always adds."""
    agent_id = memory_agent(params, ctx)
    memories = _new_memories(params, ctx)
    if not memories:
        return {"written": [], "created": 0, "updated": 0}
    dedupe = str(params.get("dedupe") or "auto")
    if dedupe not in ("auto", "none"):
        raise InvalidInput("memory.write: dedupe must be auto or none")
    service = await ctx.services.memory.service()
    await admit_memories(ctx, service, agent_id, len(memories))
    with memory_span("upsert_memory", agent_id, ctx) as span:
        outcomes = await service.write(
            agent_id,
            memories,
            dedupe="none" if dedupe == "none" else "auto",
            similarity_threshold=float(params.get("similarity_threshold") or 0.9),
        )
        span.set("gen_ai.memory.record.count", len(outcomes))
        if len(outcomes) == 1:
            span.set("gen_ai.memory.record.id", outcomes[0].memory.id)
    written = [{"id": o.memory.id, "type": o.memory.type, "action": o.action} for o in outcomes]
    for outcome in outcomes:  # the turn links to every memory it wrote
        link_turn(
            ctx.turn_id,
            "memory_write",
            outcome.memory.id,
            ctx.conversation_id,
            agent_id=agent_id,
            action=outcome.action,
            type=outcome.memory.type,
        )
    return {
        "written": written,
        "created": sum(1 for o in outcomes if o.action == "created"),
        "updated": sum(1 for o in outcomes if o.action == "updated"),
    }


async def admit_memories(
    ctx: ActionContext, service: MemoryService, agent_id: str, adding: int
) -> None:
    """Refuse a write that would take the agent's client past its ``memories`` quota: the whole
    batch, before anything is written (``QUOTA_EXCEEDED``, not retriable: stored memories do
    not go away by themselves)."""
    store = ctx.services.store
    client_id = ctx.client_id or store.agents.get(agent_id).client_id
    quota = store.quotas.get(client_id)
    allowed = quota.memories if quota is not None else None
    if allowed is None:
        return
    stored = await service.count([a.id for a in store.agents.list_for_client(client_id)])
    refusal = check_batch(Limit.MEMORIES, stored, adding, allowed, "memories stored")
    if refusal is not None:
        raise NonRetryableError(
            f"memory.write refused, nothing was written: {refusal.message}; delete memories "
            "or ask the operator for a larger quota",
            code=ErrorCode.QUOTA_EXCEEDED,
        )


@contextmanager
def memory_span(operation: str, agent_id: str, ctx: ActionContext) -> Iterator[Span]:
    """A memory operation's span (GenAI conventions: the agent's memories are its store)."""
    with span(
        operation,
        kind=SpanKind.CLIENT,
        conversation_id=ctx.conversation_id,
        turn_id=ctx.turn_id,
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.memory.store.id": agent_id,
            "gen_ai.agent.id": agent_id,
            "gen_ai.conversation.id": ctx.conversation_id or "",
        },
    ) as opened:
        yield opened


def search_request(params: JsonObject) -> SearchRequest:
    """A ``SearchRequest`` from action params / a REST body (validated)."""
    try:
        mode = SearchMode(str(params.get("mode") or "vector"))
        weights = RankWeights.model_validate(params.get("weights") or {})
        types = params.get("types") or ()
        if isinstance(types, str):
            types = (types,)
        return SearchRequest(
            query=str(params.get("query") or ""),
            k=int(params.get("k") or 5),
            mode=mode,
            types=tuple(str(t) for t in types),
            weights=weights,
            include_consolidated=bool(params.get("include_consolidated", False)),
            text_weight=float(params.get("text_weight", 0.5)),
        )
    except (ValueError, TypeError, ValidationError) as exc:
        raise InvalidInput(f"memory.search: {exc}") from exc


@action("memory.search")
async def memory_search(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """The ``k`` best memories for ``query``: ``mode`` vector|fts|hybrid, optional ``types``,
    ranked by ``weights.relevance * relevance + weights.significance * significance``.
    An empty query finds nothing (context assembly for an empty message must not fail)."""
    agent_id = memory_agent(params, ctx)
    request = search_request(params)
    if not request.query.strip():
        return {"query": request.query, "memories": []}
    service = await ctx.services.memory.service()
    with memory_span("search_memory", agent_id, ctx) as span:
        hits = await service.search(agent_id, request)
        span.set("gen_ai.memory.record.count", len(hits))
        if capture_content():
            span.set("gen_ai.memory.query.text", clipped(request.query))
    full = await service.resolve_contents([h.memory for h in hits])
    hits = [h.model_copy(update={"memory": m}) for h, m in zip(hits, full, strict=True)]
    return {"query": request.query, "memories": [hit_json(h) for h in hits]}


def _memory_id(params: JsonObject) -> str:
    memory_id = params.get("id") or params.get("memory_id")
    if not memory_id:
        raise InvalidInput("this memory action needs an id")
    return str(memory_id)


@action("memory.read")
async def memory_read(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """One memory with its full content (large contents come from the object store)."""
    agent_id = memory_agent(params, ctx)
    service = await ctx.services.memory.service()
    return memory_json(await service.read(agent_id, _memory_id(params)))


@action("memory.delete")
async def memory_delete(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    agent_id = memory_agent(params, ctx)
    service = await ctx.services.memory.service()
    deleted = await service.delete(agent_id, _memory_id(params))
    return {"deleted": deleted.id}


@library_callable
def assemble_context(data: JsonObject) -> JsonObject:
    """``python`` callable for the default context-assembly task: the previous action's memories,
    the turn's pending operations and tool specs rendered as ``system_context``."""
    previous = data.get("previous") or {}
    task_input = data.get("input") or {}
    memories = previous.get("memories") if isinstance(previous, dict) else None
    return {
        "system_context": render_context(
            memories or [], task_input.get("pending") or [], task_input.get("tools") or []
        )
    }
