"""Smart routing (seed 004 ``routeSmart``): a message with no explicit target goes to the
conversation whose recent messages it matches best, by embedding similarity.

The candidates are the client's labelled sessions and its newest active root conversations (with
an acting user: only those it may write in), each with a message already; a candidate's score is
the best cosine similarity between the message and its ``RECENT_MESSAGES`` newest messages (each
embedded once, ``core.message_vectors``). The best candidate at or over ``min_score`` wins and
the message continues that conversation at its tip; otherwise the fallback target is taken, if
the client gave one. The decision, with every candidate's score, is stored with the message
(``core.route_model``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from core.access import Action, allows
from core.domain import ConversationStatus, Message
from core.forks import latest_turn_id
from core.memory.embedding import Embedder
from core.message_search import most_similar
from core.message_vectors import message_vectors
from core.route_model import RouteCandidate, RouteDecision
from core.store import Store

RECENT_MESSAGES = 6
DEFAULT_MIN_SCORE = 0.35
SHOWN_CANDIDATES = 10


@dataclass(frozen=True)
class Candidate:
    conversation_id: str
    turn_id: str | None
    session: str | None
    title: str | None
    messages: list[Message]


def gather_candidates(
    store: Store, client_id: str, user: str | None, limit: int
) -> list[Candidate]:
    """The sessions (by label), then the newest active root conversations, up to ``limit``,
    each once, each with messages (and, with ``user``, each it may write in)."""
    picked: dict[str, str | None] = {}  # conversation id → its session label
    for row in store.session_labels.list(client_id, after=None, limit=limit, member=user):
        picked.setdefault(row.conversation_id, row.label)
    newest = store.conversations.list(
        client_id, ancestry="roots", limit=limit, member=user, newest_first=True
    )
    for conversation in newest:
        if len(picked) >= limit:
            break
        picked.setdefault(conversation.id, None)
    found: list[Candidate] = []
    for conversation_id, session in picked.items():
        conversation = store.conversations.get(conversation_id, client_id=client_id)
        if conversation.status is ConversationStatus.COMPLETED:
            continue
        if user is not None and not allows(
            store.members.level(conversation_id, user), Action.WRITE
        ):
            continue
        recent = store.forks.messages(conversation_id, limit=RECENT_MESSAGES, newest_first=True)
        if not recent:
            continue
        found.append(
            Candidate(
                conversation_id,
                latest_turn_id(store, conversation_id),
                session,
                conversation.title,
                [m for m, _seen in recent],
            )
        )
    return found[:limit]


async def score_candidates(
    store: Store, embedder: Embedder, content: str, candidates: list[Candidate]
) -> list[RouteCandidate]:
    """Every candidate with its score, best first."""
    messages = [m for c in candidates for m in c.messages]
    vectors = await message_vectors(store, embedder, messages)
    [query] = await embedder.embed([content])
    scored: list[RouteCandidate] = []
    for candidate in candidates:
        own = [vectors[m.id] for m in candidate.messages if m.id in vectors]
        best = most_similar(query, own, 1)
        if not best:
            continue
        scored.append(
            RouteCandidate(
                conversation_id=candidate.conversation_id,
                turn_id=candidate.turn_id,
                session=candidate.session,
                title=candidate.title,
                score=best[0].score,
            )
        )
    return sorted(scored, key=lambda c: (-c.score, c.conversation_id))


def decide(scored: list[RouteCandidate], min_score: float) -> RouteDecision:
    """The best candidate at or over ``min_score``, else none (the fallback's turn)."""
    chosen = scored[0] if scored and scored[0].score >= min_score else None
    return RouteDecision(
        chosen=chosen,
        candidates=scored[:SHOWN_CANDIDATES],
        min_score=min_score,
        fallback=chosen is None,
    )


async def smart_route(
    store: Store,
    embedder: Embedder,
    client_id: str,
    content: str,
    min_score: float,
    limit: int,
    user: str | None = None,
) -> RouteDecision:
    candidates = await asyncio.to_thread(gather_candidates, store, client_id, user, limit)
    return decide(await score_candidates(store, embedder, content, candidates), min_score)
