"""Quotas per client and per user: the limits, and the pure decisions over them.

No clock and no storage here: the shells (the gateway's ``serving.gateway.quota_checks``, the
conversation actor through the ``TurnQuotas`` port, the executor's ``memory.write``) read the time,
the counts and the quotas, and ask. A quota field left ``None`` is unlimited; a client or user
without a stored quota gets ``Quota()`` / ``UserQuota()`` (everything unlimited).

- ``requests_per_second`` / ``burst``: a token bucket per client, and per user of a client
  (``take``); every authenticated request costs one token of each.
- ``concurrent_websockets``, ``concurrent_turns``: how many may be open / active at once.
- ``conversations``, ``memories``: how many may be stored (per client).
- ``tokens_per_day``: model tokens (prompt + completion) of the client's (the user's) turns since
  00:00 UTC.

Over a quota the answer is a refusal with a ``retry_after_s``: HTTP 429 with ``Retry-After``, or a
turn that fails with reason ``quota`` (``TurnAdmission``: a turn an agent or a workflow starts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# How long a refusal of a count quota (turns, sockets, stored objects) asks the client to wait:
# those free up when something ends, which no clock predicts.
COUNT_RETRY_AFTER_S = 1.0


class BaseQuota(BaseModel):
    """The limits a client and a user both have (``None``: unlimited)."""

    model_config = ConfigDict(extra="forbid")

    requests_per_second: float | None = Field(
        None, ge=0.001, le=100_000, description="At least one request per 1000 s"
    )
    burst: int | None = Field(
        None, ge=1, le=1_000_000, description="Bucket size; default: one second of requests"
    )
    concurrent_turns: int | None = Field(None, ge=0, le=1_000_000)
    tokens_per_day: int | None = Field(None, ge=0, le=10**12)

    def capacity(self) -> float:
        """The token bucket's size: ``burst``, else one second of requests (at least 1)."""
        if self.burst is not None:
            return float(self.burst)
        return max(1.0, float(self.requests_per_second or 1.0))

    def limits_turns(self) -> bool:
        """Whether starting a turn is checked (concurrent turns or the day's tokens)."""
        return self.concurrent_turns is not None or self.tokens_per_day is not None


class Quota(BaseQuota):
    """A client's limits (``None``: the deployment's default, ``with_defaults``)."""

    concurrent_websockets: int | None = Field(None, ge=0, le=1_000_000)
    conversations: int | None = Field(None, ge=0, le=1_000_000_000)
    memories: int | None = Field(None, ge=0, le=1_000_000_000)
    concurrent_runs: int | None = Field(
        None, ge=0, le=1_000_000, description="Workflow runs pending or running at once"
    )
    triggers: int | None = Field(None, ge=0, le=1_000_000, description="Cron triggers stored")


def with_defaults(stored: Quota | None, defaults: Quota) -> Quota:
    """The quota that applies: each field the client's own, else the deployment's default."""
    if stored is None:
        return defaults
    mine = stored.model_dump(exclude_none=True)
    return Quota.model_validate({**defaults.model_dump(exclude_none=True), **mine})


class UserQuota(BaseQuota):
    """One user's limits inside a client (the ``X-Wonder-User`` a client names); the client's
    own quota still applies on top."""


class Limit(StrEnum):
    """Which quota refused a request (the error message and the audit name it)."""

    REQUESTS = "requests_per_second"
    WEBSOCKETS = "concurrent_websockets"
    TURNS = "concurrent_turns"
    CONVERSATIONS = "conversations"
    MEMORIES = "memories"
    TOKENS = "tokens_per_day"
    RUNS = "concurrent_runs"
    TRIGGERS = "triggers"


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


def take(
    bucket: Bucket | None, quota: BaseQuota, now: float, whose: str = ""
) -> tuple[Bucket | None, Refusal | None]:
    """Take one request from ``bucket`` (None: a full one) at ``now``.

    Returns the new state and, when the bucket is empty, a refusal saying when one token will be
    back. Without a rate the bucket is not kept (``None``). ``whose`` starts the message
    (``"user alice: "`` for a user's bucket).
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
        f"{whose}more than {rate:g} requests per second (burst {capacity:g}); retry in {wait:.2f}s",
        wait,
    )
    return Bucket(tokens=tokens, at=now), refusal


def check_count(
    limit: Limit, current: int, allowed: int | None, what: str, whose: str = ""
) -> Refusal | None:
    """Refuse one more of ``what`` when ``current`` already reaches ``allowed``."""
    return check_batch(limit, current, 1, allowed, what, whose)


def check_batch(
    limit: Limit, current: int, adding: int, allowed: int | None, what: str, whose: str = ""
) -> Refusal | None:
    """Refuse ``adding`` more of ``what`` when ``current + adding`` would pass ``allowed`` (all
    of them: a batch is taken whole or not at all)."""
    if allowed is None or current + adding <= allowed:
        return None
    message = f"{whose}quota {limit.value} reached: {current} {what} (limit {allowed})"
    if adding > 1:
        message = f"{whose}quota {limit.value}: {current} {what} and {adding} more would pass "
        message += f"the limit of {allowed}"
    return Refusal(limit, message, COUNT_RETRY_AFTER_S)


def start_of_utc_day(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def until_tomorrow_s(now: datetime) -> float:
    """Seconds from ``now`` to the next 00:00 UTC (when the day's tokens start over)."""
    return (start_of_utc_day(now) + timedelta(days=1) - now).total_seconds()


def check_tokens(
    used_today: int, allowed: int | None, now: datetime, whose: str = ""
) -> Refusal | None:
    """Refuse a new turn when the day's model tokens reach ``allowed`` (retry at 00:00 UTC)."""
    if allowed is None or used_today < allowed:
        return None
    return Refusal(
        Limit.TOKENS,
        f"{whose}quota tokens_per_day reached: {used_today} model tokens today (limit {allowed})",
        until_tomorrow_s(now),
    )


# --------------------------------------------------------------------------- turns


def user_scope(user_id: str) -> str:
    """How refusals of a user's quota start (the client's own start with ``quota``)."""
    return f"user {user_id}: "


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """One scope's turn quotas (the client's, or a user's) with the figures they are checked on:
    its active turns and its model tokens since 00:00 UTC, as the store shows them."""

    whose: str  # "" for the client, ``user_scope(user)`` for a user
    concurrent_turns: int | None
    tokens_per_day: int | None
    active_turns: int = 0
    tokens_today: int = 0


@dataclass(frozen=True, slots=True)
class TurnAdmission:
    """What a new turn is admitted on: whom it works for (``user_id``: the user whose message,
    delegation or workflow started it; None when no user is behind it) and, for the client and
    that user, the turn quotas that apply with their figures (no scope: nothing limits it)."""

    user_id: str | None
    at: datetime
    scopes: tuple[TurnFigures, ...] = ()


def refuse_turn(admission: TurnAdmission) -> Refusal | None:
    """The first quota a new turn would pass (concurrent turns, then the day's tokens; the
    client's, then the user's), or None."""
    for scope in admission.scopes:
        refusal = check_count(
            Limit.TURNS, scope.active_turns, scope.concurrent_turns, "active turns", scope.whose
        ) or check_tokens(scope.tokens_today, scope.tokens_per_day, admission.at, scope.whose)
        if refusal is not None:
            return refusal
    return None


def tokens_left(scopes: tuple[TurnFigures, ...]) -> int | None:
    """The model tokens the day has left under every ``tokens_per_day`` that applies (None:
    no limit)."""
    left = [s.tokens_per_day - s.tokens_today for s in scopes if s.tokens_per_day is not None]
    return max(0, min(left)) if left else None


def check_turn_tokens(spent: int, left: int | None, now: datetime) -> Refusal | None:
    """During a turn: refuse its next model call once it has spent the ``left`` model tokens
    the day had for it (its client's and user's ``tokens_per_day``, other turns' counted)."""
    if left is None or spent < left:
        return None
    return Refusal(
        Limit.TOKENS,
        f"quota tokens_per_day reached during the turn: it used {spent} model tokens and the "
        f"day had {left} left; no further model call",
        until_tomorrow_s(now),
    )


def retry_hint(refusal: Refusal) -> str:
    """When to ask again, for a message a model or a person reads."""
    return f"retry in {max(1, math.ceil(refusal.retry_after_s))}s"
