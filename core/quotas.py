"""Quotas per client: the limits, and the pure decisions over them (state + request → decision).

No clock and no storage here: the gateway's shell (``serving.gateway.quota_checks``) reads the time,
the counts and the client's ``Quota``, and asks. A quota field left ``None`` is unlimited; a client
without a stored quota gets ``Quota()`` (everything unlimited) unless the operator set defaults.

- ``requests_per_second`` / ``burst``: a token bucket per client (``take``); every authenticated
  request costs one token.
- ``concurrent_websockets``, ``concurrent_turns``: how many may be open / active at once.
- ``conversations``, ``memories``: how many may be stored.
- ``tokens_per_day``: model tokens (prompt + completion) of the client's turns since 00:00 UTC.

Over a quota the answer is a refusal with a ``retry_after_s``: HTTP 429 with ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# How long a refusal of a count quota (turns, sockets, stored objects) asks the client to wait:
# those free up when something ends, which no clock predicts.
COUNT_RETRY_AFTER_S = 1.0


class Quota(BaseModel):
    """A client's limits (``None``: unlimited)."""

    model_config = ConfigDict(extra="forbid")

    requests_per_second: float | None = Field(None, gt=0, le=100_000)
    burst: int | None = Field(
        None, ge=1, le=1_000_000, description="Bucket size; default: one second of requests"
    )
    concurrent_websockets: int | None = Field(None, ge=0, le=1_000_000)
    concurrent_turns: int | None = Field(None, ge=0, le=1_000_000)
    conversations: int | None = Field(None, ge=0, le=1_000_000_000)
    memories: int | None = Field(None, ge=0, le=1_000_000_000)
    tokens_per_day: int | None = Field(None, ge=0, le=10**12)

    def capacity(self) -> float:
        """The token bucket's size: ``burst``, else one second of requests (at least 1)."""
        if self.burst is not None:
            return float(self.burst)
        return max(1.0, float(self.requests_per_second or 1.0))


class Limit(StrEnum):
    """Which quota refused a request (the error message and the audit name it)."""

    REQUESTS = "requests_per_second"
    WEBSOCKETS = "concurrent_websockets"
    TURNS = "concurrent_turns"
    CONVERSATIONS = "conversations"
    MEMORIES = "memories"
    TOKENS = "tokens_per_day"


@dataclass(frozen=True, slots=True)
class Refusal:
    limit: Limit
    message: str
    retry_after_s: float


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token bucket's state: ``tokens`` left at ``at`` (a monotonic time, seconds)."""

    tokens: float
    at: float


def take(bucket: Bucket | None, quota: Quota, now: float) -> tuple[Bucket | None, Refusal | None]:
    """Take one request from ``bucket`` (None: a full one) at ``now``.

    Returns the new state and, when the bucket is empty, a refusal saying when one token will be
    back. Without a rate the bucket is not kept (``None``).
    """
    rate = quota.requests_per_second
    if rate is None:
        return None, None
    capacity = quota.capacity()
    if bucket is None:
        bucket = Bucket(tokens=capacity, at=now)
    tokens = min(capacity, bucket.tokens + max(0.0, now - bucket.at) * rate)
    if tokens >= 1.0:
        return Bucket(tokens=tokens - 1.0, at=now), None
    wait = (1.0 - tokens) / rate
    refusal = Refusal(
        Limit.REQUESTS,
        f"more than {rate:g} requests per second (burst {capacity:g}); retry in {wait:.2f}s",
        wait,
    )
    return Bucket(tokens=tokens, at=now), refusal


def check_count(limit: Limit, current: int, allowed: int | None, what: str) -> Refusal | None:
    """Refuse one more of ``what`` when ``current`` already reaches ``allowed``."""
    if allowed is None or current < allowed:
        return None
    return Refusal(
        limit,
        f"quota {limit.value} reached: {current} {what} (limit {allowed})",
        COUNT_RETRY_AFTER_S,
    )


def start_of_utc_day(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def check_tokens(used_today: int, allowed: int | None, now: datetime) -> Refusal | None:
    """Refuse a new turn when the day's model tokens reach ``allowed`` (retry at 00:00 UTC)."""
    if allowed is None or used_today < allowed:
        return None
    tomorrow = start_of_utc_day(now) + timedelta(days=1)
    return Refusal(
        Limit.TOKENS,
        f"quota tokens_per_day reached: {used_today} model tokens today (limit {allowed})",
        (tomorrow - now).total_seconds(),
    )
