"""Cron schedules: the usual five fields (minute hour day-of-month month day-of-week, UTC).

Each field is ``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma list of
those; day-of-week 0-7 (0 and 7 are Sunday). As in cron, when both day fields are restricted a
day matching either runs. A range whose end is below its start wraps around (hour ``22-2`` is
22, 23, 0, 1, 2). ``CRON_PATTERN`` is the same grammar as a regular expression (the API's schema
publishes it), so a schedule it matches parses; what it cannot say is a day that never exists
(30 February), refused by ``next_due``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import InvalidInput

BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
NAMES = ("minute", "hour", "day of month", "month", "day of week")
_NUMBERS = (
    "[0-5]?[0-9]",
    "[01]?[0-9]|2[0-3]",
    "0?[1-9]|[12][0-9]|3[01]",
    "0?[1-9]|1[0-2]",
    "[0-7]",
)


def _field_pattern(number: str) -> str:
    item = f"(?:\\*|(?:{number})(?:-(?:{number}))?)(?:/[1-9][0-9]{{0,2}})?"
    return f"{item}(?:,{item})*"


CRON_PATTERN = "^ *" + " +".join(_field_pattern(n) for n in _NUMBERS) + " *$"


@dataclass(frozen=True)
class CronSchedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    def day_matches(self, at: datetime) -> bool:
        weekday = (at.weekday() + 1) % 7
        if self.any_day or self.any_weekday:
            return at.day in self.days and weekday in self.weekdays
        return at.day in self.days or weekday in self.weekdays


def _field(text: str, low: int, high: int, name: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                start, end = low, high
            elif "-" in base:
                first, last = base.split("-", 1)
                start, end = int(first), int(last)
            else:
                start = end = int(base)
        except ValueError:
            raise InvalidInput(f"schedule: {name} field {text!r} is not a cron field") from None
        if step < 1 or not (low <= start <= high and low <= end <= high):
            raise InvalidInput(f"schedule: {name} field {text!r} is outside {low}-{high}")
        span = (
            list(range(start, end + 1))
            if start <= end
            else [
                *range(start, high + 1),
                *range(low, end + 1),
            ]
        )
        values.update(span[::step])
    return frozenset(values)


def shortest_interval_s(schedule: CronSchedule) -> int:
    """The shortest time between two firings, in seconds (pure, from the minute and hour sets;
    counted as if it fired on consecutive days, so it never overestimates)."""
    times = sorted(h * 60 + m for h in schedule.hours for m in schedule.minutes)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    gaps.append(24 * 60 - times[-1] + times[0])  # from the day's last firing to the next first
    return min(gaps) * 60


def parse_cron(expression: str) -> CronSchedule:
    """``InvalidInput`` naming the field that is wrong."""
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidInput(
            "schedule: a cron expression has 5 fields (minute hour day month weekday)"
        )
    parsed = [_field(text, *BOUNDS[n], NAMES[n]) for n, text in enumerate(fields)]
    weekdays = frozenset(d % 7 for d in parsed[4])
    return CronSchedule(
        parsed[0], parsed[1], parsed[2], parsed[3], weekdays, fields[2] == "*", fields[4] == "*"
    )


def next_due(schedule: CronSchedule, after: datetime) -> datetime:
    """The first whole minute strictly after ``after`` that the schedule names."""
    at = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while at.year <= after.year + 8:  # every possible schedule matches within 8 years (29 Feb)
        if at.month not in schedule.months:
            at = (at.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
        elif not schedule.day_matches(at):
            at = at.replace(hour=0, minute=0) + timedelta(days=1)
        elif at.hour not in schedule.hours:
            at = at.replace(minute=0) + timedelta(hours=1)
        elif at.minute not in schedule.minutes:
            at += timedelta(minutes=1)
        else:
            return at
    raise InvalidInput("schedule: it names no time that exists (e.g. 30 February)")
