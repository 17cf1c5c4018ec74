"""Quotas as the store holds them, for the shells that check them: the ``TurnQuotas`` port.

``StoredQuotas`` reads a client's ``Quota`` and its users' ``UserQuota`` (each cached for
``cache_s`` seconds: a change reaches every process within that time, at once where ``forget``
is called), and the figures turn quotas are checked on — active turns and the day's model tokens,
of the client and of one user — only when a limit asks for them. The decisions are
``core.quotas``'s: the gateway refuses a message with 429, a conversation actor's planning fails
an agent's or a workflow's turn with reason ``quota``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime

from core.domain import AgentCaller, Caller, UserCaller, WorkflowCaller
from core.errors import NotFound
from core.quotas import (
    Limit,
    Quota,
    Refusal,
    TurnAdmission,
    TurnFigures,
    UserQuota,
    check_count,
    start_of_utc_day,
    tokens_left,
    user_scope,
    with_defaults,
)
from core.settings import Settings
from core.store import Store
from core.workflows import ConversationParent, WorkflowParent

QUOTA_CACHE_S = 2.0


def default_quota(settings: Settings) -> Quota:
    """The deployment's default quota of every client (``WONDER_QUOTA_DEFAULT_*``; 0: none),
    for each field a client's stored quota leaves out."""
    figures = {
        "concurrent_turns": settings.quota_default_concurrent_turns,
        "concurrent_websockets": settings.quota_default_concurrent_websockets,
        "conversations": settings.quota_default_conversations,
        "concurrent_runs": settings.quota_default_concurrent_runs,
        "triggers": settings.quota_default_triggers,
    }
    return Quota.model_validate({k: v for k, v in figures.items() if v})


MAX_CALLER_HOPS = 16  # a delegation chain is bounded by max_delegation_depth; this bounds a loop


class StoredQuotas:
    """Client and user quotas from the store (cached), and the turn figures they need."""

    def __init__(
        self,
        store: Store,
        monotonic: Callable[[], float] = time.monotonic,
        cache_s: float = QUOTA_CACHE_S,
        defaults: Quota | None = None,
    ) -> None:
        self.store = store
        self.monotonic = monotonic
        self.cache_s = cache_s
        self.defaults = defaults or Quota()
        self._lock = threading.Lock()  # the gateway's sync routes run on a thread pool
        self._clients: dict[str, tuple[float, Quota]] = {}
        self._users: dict[str, tuple[float, frozenset[str]]] = {}  # client → users with quotas
        self._user_quotas: dict[tuple[str, str], tuple[float, UserQuota | None]] = {}

    # ------------------------------------------------------------------ the quotas

    def cached_client(self, client_id: str) -> Quota | None:
        """The client's quota if cached and fresh (no I/O: safe on an event loop)."""
        cached = self._clients.get(client_id)
        if cached is not None and self.monotonic() - cached[0] < self.cache_s:
            return cached[1]
        return None

    def client(self, client_id: str) -> Quota:
        cached = self.cached_client(client_id)
        if cached is not None:
            return cached
        quota = with_defaults(self.store.quotas.get(client_id), self.defaults)
        with self._lock:
            self._clients[client_id] = (self.monotonic(), quota)
        return quota

    def user(self, client_id: str, user_id: str) -> UserQuota | None:
        """``user_id``'s quota inside ``client_id`` (None: the user has none of its own). One
        cached read per client tells which users have one, so users without cost nothing."""
        if user_id not in self.quota_users(client_id):
            return None
        now = self.monotonic()
        cached = self._user_quotas.get((client_id, user_id))
        if cached is not None and now - cached[0] < self.cache_s:
            return cached[1]
        quota = self.store.quotas.get_user(client_id, user_id)
        with self._lock:
            self._user_quotas[(client_id, user_id)] = (now, quota)
        return quota

    def quota_users(self, client_id: str) -> frozenset[str]:
        """The users of ``client_id`` with a quota of their own (cached)."""
        now = self.monotonic()
        users = self._users.get(client_id)
        if users is None or now - users[0] >= self.cache_s:
            users = (now, frozenset(self.store.quotas.users_with_quotas(client_id)))
            with self._lock:
                self._users[client_id] = users
        return users[1]

    def may_limit_turns(self, client_id: str, user_id: str | None) -> bool:
        """False when the cache alone shows that no turn quota applies (no I/O: safe on an
        event loop); True when one does, or the cache cannot tell."""
        quota = self.cached_client(client_id)
        if quota is None or quota.limits_turns():
            return True
        if user_id is None:
            return False
        users = self._users.get(client_id)
        fresh = users is not None and self.monotonic() - users[0] < self.cache_s
        return not fresh or user_id in (users[1] if users else ())

    def forget(self, client_id: str) -> None:
        """Drop what is cached of ``client_id``'s quotas (after a change made through here)."""
        with self._lock:
            self._clients.pop(client_id, None)
            self._users.pop(client_id, None)
            for key in [k for k in self._user_quotas if k[0] == client_id]:
                del self._user_quotas[key]

    # ------------------------------------------------------------------ the port

    def conversation_refusal(self, client_id: str) -> Refusal | None:
        """One more conversation of the client's, as its ``conversations`` quota stands."""
        allowed = self.client(client_id).conversations
        if allowed is None:
            return None
        stored = self.store.quotas.conversations(client_id)
        return check_count(Limit.CONVERSATIONS, stored, allowed, "conversations stored")

    def run_refusal(self, client_id: str) -> Refusal | None:
        """One more workflow run of the client's, as its ``concurrent_runs`` quota stands."""
        allowed = self.client(client_id).concurrent_runs
        if allowed is None:
            return None
        active = self.store.quotas.active_runs(client_id)
        return check_count(Limit.RUNS, active, allowed, "workflow runs pending or running")

    def trigger_refusal(self, client_id: str) -> Refusal | None:
        """One more cron trigger of the client's, as its ``triggers`` quota stands."""
        allowed = self.client(client_id).triggers
        if allowed is None:
            return None
        stored = self.store.quotas.triggers(client_id)
        return check_count(Limit.TRIGGERS, stored, allowed, "cron triggers stored")

    def admission(
        self, client_id: str, user_id: str | None, at: datetime, *, excluding: str | None = None
    ) -> TurnAdmission:
        quota = self.client(client_id)
        user_quota = self.user(client_id, user_id) if user_id is not None else None
        limited = [
            (whose, q)
            for whose, q in (("", quota), (user_scope(user_id or ""), user_quota))
            if q is not None and q.limits_turns()
        ]
        if not limited:
            return TurnAdmission(user_id, at)
        tokens = any(q.tokens_per_day is not None for _, q in limited)
        usage = self.store.quotas.turn_usage(
            client_id,
            user_id if user_quota is not None else None,
            start_of_utc_day(at) if tokens else None,
            excluding,
        )
        scopes = tuple(
            TurnFigures(
                whose,
                q.concurrent_turns,
                q.tokens_per_day,
                usage.user_active_turns if whose else usage.active_turns,
                usage.user_tokens if whose else usage.tokens,
            )
            for whose, q in limited
        )
        return TurnAdmission(user_id, at, scopes)

    async def tokens_left(self, client_id: str, turn_id: str, at: datetime) -> int | None:
        """After every model call: answered from the cache, without leaving the event loop,
        while no ``tokens_per_day`` applies (the usual case); else read in a worker thread."""
        if not self._may_limit_tokens(client_id):
            return None
        return await asyncio.to_thread(self._tokens_left, client_id, turn_id, at)

    def _may_limit_tokens(self, client_id: str) -> bool:
        quota = self.cached_client(client_id)
        users = self._users.get(client_id)
        fresh = users is not None and self.monotonic() - users[0] < self.cache_s
        if quota is None or not fresh:
            return True  # the cache cannot tell: read
        return quota.tokens_per_day is not None or bool(users and users[1])

    def _tokens_left(self, client_id: str, turn_id: str, at: datetime) -> int | None:
        if self.client(client_id).tokens_per_day is None and not self.quota_users(client_id):
            return None  # nothing limits this client's tokens: no turn to read
        try:
            user_id = self.store.turns.get(turn_id).user_id
        except NotFound:
            return None
        admission = self.admission(client_id, user_id, at, excluding=turn_id)
        return tokens_left(tuple(s for s in admission.scopes if s.tokens_per_day is not None))

    def acting_user(self, client_id: str, caller: Caller) -> str | None:
        for _ in range(MAX_CALLER_HOPS):
            match caller:
                case UserCaller(user_id=user_id):
                    return None if user_id == client_id else user_id
                case AgentCaller(turn_id=turn_id):
                    return self._turn_user(turn_id)
                case WorkflowCaller(run_id=run_id):
                    parent = self._run_parent(run_id)
                    match parent:
                        case ConversationParent(turn_id=str() as turn_id):
                            return self._turn_user(turn_id)
                        case WorkflowParent(run_id=parent_run):
                            caller = WorkflowCaller(run_id=parent_run)
                        case _:
                            return None  # a run a client started through the API
        return None

    def _turn_user(self, turn_id: str) -> str | None:
        try:
            return self.store.turns.get(turn_id).user_id
        except NotFound:
            return None

    def _run_parent(self, run_id: str) -> ConversationParent | WorkflowParent | None:
        try:
            return self.store.workflow_runs.get(run_id).parent
        except NotFound:
            return None
