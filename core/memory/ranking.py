"""Memory ranking: pure functions, no storage, no clock.

A search first finds candidates by relevance (vector, full-text or both), then ranks them by
``w_rel * relevance + w_sig * significance`` (ARCHITECTURE.md §7). Relevance is always in 0..1:

- vector: cosine similarity clipped at 0 (``1 - cosine distance``);
- full text: BM25 divided by the best BM25 among the candidates (so the best text match is 1);
- hybrid: ``(1 - text_weight) * vector + text_weight * text``, with the vector relevance computed
  exactly for every candidate, including those only the full-text search found.

The default weights (0.6 / 0.4) make a high-significance, moderately relevant memory beat a
low-significance, more relevant one: (0.55, 0.9) scores 0.69 against (0.75, 0.1) at 0.49.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.memory.records import RankWeights

DEFAULT_WEIGHTS = RankWeights()
DEFAULT_TEXT_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory found by a search, before ranking."""

    memory_id: str
    relevance: float
    significance: float


@dataclass(frozen=True, slots=True)
class Ranked:
    memory_id: str
    relevance: float
    significance: float
    score: float


def score(relevance: float, significance: float, weights: RankWeights = DEFAULT_WEIGHTS) -> float:
    """The ranking score of one memory."""
    return weights.relevance * relevance + weights.significance * significance


def rank(
    candidates: Iterable[Candidate], k: int, weights: RankWeights = DEFAULT_WEIGHTS
) -> list[Ranked]:
    """The ``k`` best candidates by score; ties go to the more relevant, then to the smaller id."""
    ranked = [
        Ranked(
            c.memory_id, c.relevance, c.significance, score(c.relevance, c.significance, weights)
        )
        for c in candidates
    ]
    ranked.sort(key=lambda r: (-r.score, -r.relevance, r.memory_id))
    return ranked[: max(k, 0)]


def relevance_from_cosine_distance(distance: float) -> float:
    """LanceDB's cosine distance (0..2) as a relevance in 0..1 (anti-correlated is irrelevant)."""
    if math.isnan(distance):
        return 0.0
    return min(1.0, max(0.0, 1.0 - distance))


def cosine_relevance(query: Sequence[float], vector: Sequence[float]) -> float:
    """Cosine similarity of two vectors clipped to 0..1 (0 for a zero vector)."""
    dot = sum(a * b for a, b in zip(query, vector, strict=True))
    norm = math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector))
    if norm == 0.0:
        return 0.0
    return min(1.0, max(0.0, dot / norm))


def normalize_text_scores(scores: Mapping[str, float]) -> dict[str, float]:
    """BM25 scores divided by the best one, so relevance is 0..1 and the best match is 1."""
    best = max(scores.values(), default=0.0)
    if best <= 0.0:
        return {key: 0.0 for key in scores}
    return {key: max(0.0, value) / best for key, value in scores.items()}


def fuse_relevance(
    vector_relevance: Mapping[str, float],
    text_relevance: Mapping[str, float],
    text_weight: float = DEFAULT_TEXT_WEIGHT,
) -> dict[str, float]:
    """Hybrid relevance: a weighted mean of vector and text relevance (absent text counts 0)."""
    keys = set(vector_relevance) | set(text_relevance)
    return {
        key: (1.0 - text_weight) * vector_relevance.get(key, 0.0)
        + text_weight * text_relevance.get(key, 0.0)
        for key in keys
    }


def candidate_pool_size(k: int) -> int:
    """How many candidates to fetch by relevance before ranking by score.

    Significance can lift a less relevant memory above a more relevant one, so the pool is wider
    than ``k``; a memory outside the pool cannot be ranked in (documented in docs/memory.md).
    """
    return max(4 * k, 32)
