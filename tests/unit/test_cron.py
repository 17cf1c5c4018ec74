"""Cron schedules: parsing and the next due time."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from core.cron import CRON_PATTERN, next_due, parse_cron
from core.errors import InvalidInput

AT = datetime(2026, 11, 23, 22, 30, 15, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("* * * * *", datetime(2026, 11, 23, 22, 31, tzinfo=UTC)),
        ("*/15 * * * *", datetime(2026, 11, 23, 22, 45, tzinfo=UTC)),
        ("0 9 * * 1-5", datetime(2026, 11, 24, 9, 0, tzinfo=UTC)),
        ("0 9 * * 0", datetime(2026, 11, 29, 9, 0, tzinfo=UTC)),
        ("0 9 * * 7", datetime(2026, 11, 29, 9, 0, tzinfo=UTC)),
        ("0 0 1 1 *", datetime(2027, 1, 1, 0, 0, tzinfo=UTC)),
        ("5,10 22 23 11 *", datetime(2027, 11, 23, 22, 5, tzinfo=UTC)),
        ("0 12 1 * 1", datetime(2026, 11, 30, 12, 0, tzinfo=UTC)),  # day 1 or a Monday
    ],
)
def test_next_due(expression: str, expected: datetime) -> None:
    assert next_due(parse_cron(expression), AT) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("* * * *", "5 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day of week"),
        ("*/0 * * * *", "minute"),
        ("a * * * *", "minute"),
        ("0 0 30 2 *", "no time"),
    ],
)
def test_bad_schedules(expression: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        next_due(parse_cron(expression), AT)


def test_a_reversed_range_wraps_around() -> None:
    assert sorted(parse_cron("0 22-2 * * *").hours) == [0, 1, 2, 22, 23]
    assert sorted(parse_cron("0 22-2/2 * * *").hours) == [0, 2, 22]
    assert sorted(parse_cron("0 0 * * 5-1").weekdays) == [0, 1, 5, 6]


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("* * * * *", True),
        ("*/15 0-23/2 1,15 1-12 1-5", True),
        ("0 22-2 * * 7", True),
        ("* * * *", False),
        ("60 * * * *", False),
        ("* 24 * * *", False),
        ("* * 0 * *", False),
        ("*/0 * * * *", False),
        ("a * * * *", False),
        ("*\t* * * *", False),  # the API's schema takes spaces between fields
    ],
)
def test_the_published_pattern_is_the_grammar(expression: str, matches: bool) -> None:
    assert bool(re.match(CRON_PATTERN, expression)) is matches
    if matches:
        parse_cron(expression)  # what the pattern admits parses
