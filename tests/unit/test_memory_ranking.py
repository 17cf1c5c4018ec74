"""Ranking is pure: relevance and significance in, order out."""

from __future__ import annotations

import pytest

from core.memory.ranking import (
    Candidate,
    candidate_pool_size,
    cosine_relevance,
    fuse_relevance,
    normalize_text_scores,
    rank,
    relevance_from_cosine_distance,
    score,
)
from core.memory.records import RankWeights


def test_important_moderately_relevant_beats_trivial_more_relevant_with_default_weights() -> None:
    important = Candidate("important", relevance=0.55, significance=0.9)
    trivial = Candidate("trivial", relevance=0.75, significance=0.1)
    assert [r.memory_id for r in rank([trivial, important], k=2)] == ["important", "trivial"]


def test_relevance_only_weights_restore_pure_similarity_order() -> None:
    important = Candidate("important", relevance=0.55, significance=0.9)
    trivial = Candidate("trivial", relevance=0.75, significance=0.1)
    weights = RankWeights(relevance=1.0, significance=0.0)
    assert [r.memory_id for r in rank([important, trivial], 2, weights)] == ["trivial", "important"]


def test_irrelevant_but_significant_does_not_beat_relevant_and_fairly_significant() -> None:
    noise = Candidate("noise", relevance=0.05, significance=1.0)
    answer = Candidate("answer", relevance=0.6, significance=0.5)
    assert rank([noise, answer], 1)[0].memory_id == "answer"


@pytest.mark.parametrize(
    ("candidates", "k", "expected"),
    [
        ([], 3, []),
        ([Candidate("a", 0.5, 0.5)], 0, []),
        # equal score: the more relevant first, then the smaller id
        ([Candidate("b", 0.5, 0.5), Candidate("a", 0.5, 0.5)], 2, ["a", "b"]),
        ([Candidate("x", 0.2, 0.8), Candidate("y", 0.8, 0.2)], 2, ["y", "x"]),
        ([Candidate(str(i), i / 10, 0.5) for i in range(10)], 3, ["9", "8", "7"]),
    ],
)
def test_rank_table(candidates: list[Candidate], k: int, expected: list[str]) -> None:
    assert [r.memory_id for r in rank(candidates, k)] == expected


def test_score_is_the_weighted_sum() -> None:
    assert score(0.5, 0.25, RankWeights(relevance=2.0, significance=4.0)) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("distance", "relevance"), [(0.0, 1.0), (0.25, 0.75), (1.0, 0.0), (1.7, 0.0), (-0.01, 1.0)]
)
def test_relevance_from_cosine_distance(distance: float, relevance: float) -> None:
    assert relevance_from_cosine_distance(distance) == pytest.approx(relevance)


def test_cosine_relevance() -> None:
    assert cosine_relevance([1.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
    assert cosine_relevance([1.0, 0.0], [0.0, 1.0]) == pytest.approx(0.0)
    assert cosine_relevance([1.0, 0.0], [-1.0, 0.0]) == 0.0
    assert cosine_relevance([0.0, 0.0], [1.0, 0.0]) == 0.0


def test_text_scores_normalise_to_best_match() -> None:
    assert normalize_text_scores({"a": 4.0, "b": 1.0}) == {"a": 1.0, "b": 0.25}
    assert normalize_text_scores({}) == {}
    assert normalize_text_scores({"a": 0.0}) == {"a": 0.0}


def test_hybrid_fusion_counts_missing_text_match_as_zero() -> None:
    fused = fuse_relevance({"a": 0.8, "b": 0.4}, {"b": 1.0, "c": 0.5}, text_weight=0.5)
    assert fused == pytest.approx({"a": 0.4, "b": 0.7, "c": 0.25})


def test_candidate_pool_is_wider_than_k() -> None:
    assert candidate_pool_size(1) == 32
    assert candidate_pool_size(20) == 80
