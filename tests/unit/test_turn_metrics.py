"""Turn measurements from published events (core/metrics.py TurnMetrics)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.metrics import TurnMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Recorded:
    """A ``Metrics`` that writes down what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, args))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(kind: str, seconds: float | None, **payload: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "turn_id": "t1", **payload}
    if seconds is not None:
        out["at"] = at(seconds).isoformat()
    return out


def test_a_completed_turn_is_timed_from_its_events() -> None:
    recorded = Recorded()
    metrics = TurnMetrics(recorded)  # type: ignore[arg-type]
    metrics.observe(event("turn.started", 0), at(0))
    metrics.observe(event("token", None, seq=None, delta="a"), at(0.25))
    metrics.observe(event("token", None, seq=None, delta="b"), at(0.5))
    metrics.observe(event("turn.completed", 2, failure_reason=None), at(2))
    assert recorded.calls == [
        ("turn_started", ()),
        ("tokens_streamed", (1,)),
        ("first_token", (0.25,)),
        ("tokens_streamed", (1,)),
        ("turn_ended", ("completed", "", 2.0)),
    ]


def test_a_failed_turn_is_counted_by_the_first_word_of_its_reason() -> None:
    recorded = Recorded()
    metrics = TurnMetrics(recorded)  # type: ignore[arg-type]
    metrics.observe(event("turn.started", 0), at(0))
    metrics.observe(event("turn.failed", 1, failure_reason="llm_failed: 503 from x"), at(1))
    metrics.observe(event("turn.failed", 3, failure_reason="interrupted"), at(3))  # never seen
    assert recorded.calls[1:] == [
        ("turn_ended", ("failed", "llm_failed", 1.0)),
        ("turn_ended", ("failed", "interrupted", None)),
    ]


def test_events_without_a_turn_are_ignored() -> None:
    recorded = Recorded()
    TurnMetrics(recorded).observe({"type": "conversation_started"}, at(0))  # type: ignore[arg-type]
    assert recorded.calls == []
