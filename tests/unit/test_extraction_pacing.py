"""When a completed turn's memory extraction runs (``actors.conversation.extraction_pacing``),
as a table: no Ray, no store."""

from __future__ import annotations

import pytest

from actors.conversation.extraction_pacing import CheckAt, RunNow, Waiting, next_extraction

QUIET, MAX_WAIT = 0.5, 30.0
OLDEST, NEWER = Waiting("turn_a", 100.0), Waiting("turn_b", 101.0)


@pytest.mark.parametrize(
    ("case", "waiting", "now", "quiet_since", "expected"),
    [
        ("nothing waits", [], 200.0, 0.0, None),
        ("quiet long enough: the oldest runs", [OLDEST, NEWER], 102.0, 101.4, RunNow("turn_a")),
        ("quiet exactly long enough", [OLDEST], 101.0, 100.5, RunNow("turn_a")),
        ("quiet, not yet long enough: ask when it is", [OLDEST], 101.0, 100.8, CheckAt(101.3)),
        (
            "a turn step runs: ask when the oldest is due",
            [OLDEST, NEWER],
            101.0,
            None,
            CheckAt(130.0),
        ),
        (
            "a step runs, the oldest is due: it runs all the same",
            [OLDEST],
            130.0,
            None,
            RunNow("turn_a"),
        ),
        (
            "quiet comes after the oldest is due: ask when due",
            [OLDEST],
            129.9,
            129.8,
            CheckAt(130.0),
        ),
    ],
)
def test_next_extraction(
    case: str,
    waiting: list[Waiting],
    now: float,
    quiet_since: float | None,
    expected: RunNow | CheckAt | None,
) -> None:
    got = next_extraction(
        waiting, now=now, quiet_since=quiet_since, quiet_s=QUIET, max_wait_s=MAX_WAIT
    )
    if isinstance(expected, CheckAt) and isinstance(got, CheckAt):
        assert got.at == pytest.approx(expected.at), case
    else:
        assert got == expected, case
