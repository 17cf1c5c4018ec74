"""Default quotas and bounds (``WONDER_QUOTA_DEFAULT_*``, trigger intervals)."""

from __future__ import annotations

import pytest

from core.cron import parse_cron, shortest_interval_s
from core.quotas import Quota, with_defaults
from core.settings import Settings
from core.turn_quotas import default_quota


def test_a_stored_field_wins_and_the_rest_take_the_defaults() -> None:
    defaults = default_quota(Settings())
    assert defaults.concurrent_turns == 64 and defaults.conversations == 100_000
    assert with_defaults(None, defaults) == defaults
    mine = with_defaults(Quota(conversations=5), defaults)
    assert mine.conversations == 5 and mine.concurrent_runs == defaults.concurrent_runs


def test_a_default_of_zero_is_no_default() -> None:
    settings = Settings(quota_default_concurrent_turns=0, quota_default_triggers=0)
    quota = default_quota(settings)
    assert quota.concurrent_turns is None and quota.triggers is None


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("* * * * *", 60),
        ("*/5 * * * *", 300),
        ("0 9 * * 1-5", 86_400),
        ("0,59 0,23 * * *", 60),  # 23:59 then 00:00 the next day
        ("0 3 1 * *", 86_400),  # counted as if consecutive days fired: never overestimated
    ],
)
def test_the_shortest_interval_of_a_schedule(schedule: str, seconds: int) -> None:
    assert shortest_interval_s(parse_cron(schedule)) == seconds
