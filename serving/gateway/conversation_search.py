"""Finding things in a conversation: its messages by full text or by meaning, and its counts and
token totals. A fork's inherited messages and turns count as its own (marked ``inherited_from``).

- ``GET /v1/conversations/{id}/messages/search?q=…&mode=text|semantic``: text matches every
  term, case-insensitive, newest first, scanning the history backwards (``older_before_seq``
  continues the scan where it stopped); semantic ranks the newest ``SEMANTIC_SCAN`` messages
  (before ``before_seq``) by cosine similarity to the query under the embedder, each message
  embedded once and kept (``core.message_search``).
- ``GET /v1/conversations/{id}/stats``: messages, turns by status, token totals.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import Message
from core.message_search import most_similar, query_terms, text_score
from core.message_vectors import message_vectors
from core.store.forks import Seen
from serving.gateway.auth import ClientId, Context
from serving.gateway.context import GatewayContext
from serving.gateway.conversations import owned_conversation
from serving.gateway.history import MessageOut
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1/conversations/{conversation_id}", tags=["messages"])

SCAN_BATCH = 500
TEXT_SCAN = 20_000  # messages one text search reads at most before it answers
SEMANTIC_SCAN = 2_000

Found = list[tuple[Message, Seen]]


class MessageHit(WireModel):
    message: MessageOut
    score: float = Field(
        description="text: how often the terms occur; semantic: cosine similarity (-1..1)"
    )


class MessageSearchPage(WireModel):
    mode: Literal["text", "semantic"]
    items: list[MessageHit]
    scanned: int = Field(description="Messages read to answer")
    older_before_seq: int | None = Field(
        None,
        description="Pass as before_seq to go on searching older messages (null: every older "
        "message was searched)",
    )


class ConversationStats(WireModel):
    conversation_id: str
    messages: int = Field(description="Messages the conversation shows (inherited ones included)")
    inherited_messages: int
    turns: int
    inherited_turns: int
    turns_by_status: dict[str, int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def _out(conversation_id: str, message: Message, seen: Seen) -> MessageOut:
    return MessageOut.model_validate(
        {
            **message.model_dump(),
            "conversation_id": conversation_id,
            "inherited_from": seen.inherited_from,
        }
    )


def _text_search(
    context: GatewayContext, conversation_id: str, q: str, limit: int, before: int | None
) -> MessageSearchPage:
    terms = query_terms(q)
    hits: list[MessageHit] = []
    scanned = 0
    while scanned < TEXT_SCAN:
        batch = context.store.forks.messages(
            conversation_id, before_seq=before, limit=SCAN_BATCH, newest_first=True
        )
        for message, seen in batch:
            scanned += 1
            before = message.seq
            score = text_score(message.content, terms)
            if score is not None:
                hits.append(MessageHit(message=_out(conversation_id, message, seen), score=score))
                if len(hits) == limit:
                    break
        if len(hits) == limit or len(batch) < SCAN_BATCH:
            more = len(hits) == limit and before is not None and before > 1
            return MessageSearchPage(
                mode="text", items=hits, scanned=scanned, older_before_seq=before if more else None
            )
    return MessageSearchPage(mode="text", items=hits, scanned=scanned, older_before_seq=before)


async def _vectors(context: GatewayContext, found: Found) -> list[bytes | None]:
    """Each message's stored vector under the embedder's model (made and stored when missing)."""
    embedder = (await context.memory.service()).embedder
    stored = await message_vectors(context.store, embedder, [m for m, _ in found])
    return [stored.get(m.id) for m, _ in found]


async def _semantic_search(
    context: GatewayContext, conversation_id: str, q: str, limit: int, before: int | None
) -> MessageSearchPage:
    found: Found = await run_in_threadpool(
        lambda: context.store.forks.messages(
            conversation_id, before_seq=before, limit=SEMANTIC_SCAN, newest_first=True
        )
    )
    vectors = await _vectors(context, found)
    embedder = (await context.memory.service()).embedder
    [query] = await embedder.embed([q])
    usable = [(pair, v) for pair, v in zip(found, vectors, strict=True) if v is not None]
    ranked = most_similar(query, [v for _, v in usable], limit)
    hits = [
        MessageHit(message=_out(conversation_id, *usable[r.index][0]), score=r.score)
        for r in ranked
    ]
    more = len(found) == SEMANTIC_SCAN
    older = found[-1][0].seq if more and found else None
    return MessageSearchPage(
        mode="semantic", items=hits, scanned=len(found), older_before_seq=older
    )


@router.get(
    "/messages/search",
    response_model=MessageSearchPage,
    summary="Search the conversation's messages by full text or by meaning",
)
async def search_messages(
    conversation_id: str,
    context: Context,
    client_id: ClientId,
    q: Annotated[str, Query(min_length=1, max_length=500, description="What to look for")],
    mode: Literal["text", "semantic"] = "text",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    before_seq: Annotated[
        int | None, Query(ge=1, description="Search messages older than this seq")
    ] = None,
) -> MessageSearchPage:
    await run_in_threadpool(owned_conversation, context, client_id, conversation_id)
    if mode == "semantic":
        query_terms(q)  # the same refusal of an empty or oversized query
        return await _semantic_search(context, conversation_id, q, limit, before_seq)
    return await run_in_threadpool(_text_search, context, conversation_id, q, limit, before_seq)


def conversation_stats(context: GatewayContext, conversation_id: str) -> ConversationStats:
    own, inherited = context.store.forks.message_counts(conversation_id)
    turns = context.store.forks.turns(conversation_id)
    prompt = sum(t.usage.prompt_tokens for t, _ in turns)
    completion = sum(t.usage.completion_tokens for t, _ in turns)
    return ConversationStats(
        conversation_id=conversation_id,
        messages=own + inherited,
        inherited_messages=inherited,
        turns=len(turns),
        inherited_turns=sum(1 for _, seen in turns if seen.inherited_from is not None),
        turns_by_status=dict(Counter(t.status.value for t, _ in turns)),
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
    )


@router.get(
    "/stats",
    response_model=ConversationStats,
    tags=["conversations"],
    summary="Message and turn counts and token totals (a fork's inherited ones included)",
)
def get_stats(conversation_id: str, context: Context, client_id: ClientId) -> ConversationStats:
    owned_conversation(context, client_id, conversation_id)
    return conversation_stats(context, conversation_id)
