"""Searching a conversation's messages: full text (every term, case-insensitive) and semantic
(cosine similarity of the embedder's vectors, made once per message and kept).

Pure: terms, matching and ranking; the gateway reads the messages and the vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInput

MAX_QUERY_CHARS = 500
MAX_TERMS = 16


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct lower-cased terms of ``query`` (whitespace-separated), in order;
    ``InvalidInput`` when there is none or too many."""
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"q: at most {MAX_QUERY_CHARS} characters")
    terms = tuple(dict.fromkeys(term.casefold() for term in query.split()))
    if not terms:
        raise InvalidInput("q: give at least one term")
    if len(terms) > MAX_TERMS:
        raise InvalidInput(f"q: at most {MAX_TERMS} terms")
    return terms


def text_score(content: str, terms: Sequence[str]) -> int | None:
    """How often the terms occur in ``content`` (case-insensitive), None unless every one does."""
    folded = content.casefold()
    counts = [folded.count(term) for term in terms]
    return None if not all(counts) else sum(counts)


def vector_bytes(vector: Sequence[float]) -> bytes:
    """A vector as stored: float32, scaled to unit length."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm else array).astype(np.float32).tobytes()


def bytes_vector(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class Ranked:
    index: int
    score: float


def most_similar(query: Sequence[float], vectors: Sequence[bytes], limit: int) -> list[Ranked]:
    """The ``limit`` stored vectors nearest ``query`` by cosine similarity, best first (vectors
    of another dimension than the query's are skipped)."""
    wanted = np.frombuffer(vector_bytes(query), dtype=np.float32)
    usable = [(i, bytes_vector(v)) for i, v in enumerate(vectors)]
    usable = [(i, v) for i, v in usable if v.shape == wanted.shape]
    if not usable or limit <= 0:
        return []
    matrix = np.stack([v for _, v in usable])
    scores = matrix @ wanted
    order = np.argsort(-scores, kind="stable")[:limit]
    return [Ranked(usable[int(j)][0], round(float(scores[int(j)]), 6)) for j in order]
