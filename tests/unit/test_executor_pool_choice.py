"""Which executor pool member a caller sends its next task to (``core.executor_pool``)."""

from __future__ import annotations

from core.executor_pool import choose_member


def test_the_first_free_member_from_the_turn_is_chosen() -> None:
    assert choose_member([0, 0, 0], 0) == 0
    assert choose_member([0, 0, 0], 2) == 2
    assert choose_member([1, 0, 0], 0) == 1
    assert choose_member([0, 1, 1], 1) == 0  # wraps around


def test_the_turn_wraps_past_the_pool_size() -> None:
    assert choose_member([0, 0], 5) == 1


def test_no_member_when_the_caller_uses_them_all_or_there_are_none() -> None:
    assert choose_member([1, 2], 0) is None
    assert choose_member([], 0) is None
