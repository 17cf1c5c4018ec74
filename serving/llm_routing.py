"""Conversation affinity: a conversation's model calls go to the replica that holds its prefix.

vLLM's prefix cache keeps the KV blocks of prompts it has seen; a conversation's next turn repeats
the previous turn's prompt (system prompt, history) plus a little, so on the same replica most of
its prefill is a cache hit. Serve's default router (power of two choices) ignores this.

``ConversationAffinityRouter`` builds on Ray Serve's own ``ConsistentHashRouter`` (``ray 2.60``,
``ray.serve.experimental.consistent_hash_router``: a hash ring over the replicas keyed by the
request's ``session_id``, which handles set with ``.options(session_id=...)`` and the HTTP proxy
takes from the ``x-session-id`` header) and changes one thing: the ring only picks a
conversation's *first* replica. After that the router remembers the replica that served it and
keeps sending the conversation there while that replica has fewer than
``max_ongoing_for_affinity`` requests in flight; past that, or when the replica is gone, the
request goes to the least-loaded replica, which then becomes the conversation's replica. Requests
without a session id go to the least-loaded replica.

The memory is per process (each process holding a handle has its own router), which is enough:
one Conversation actor makes all of its conversation's calls, and the ring makes a fresh process
pick the same replica as long as the replica set has not changed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ray.serve._private.common import ReplicaID, RequestMetadata
from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.replica_wrapper import RunningReplica
from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter

# A module, not its objects: Serve pickles this module's router class *by value* (its globals
# copied into every process), so the process-wide route log is reached through its own module.
from serving import llm_routes
from serving.llm_routes import in_flight, last_route

__all__ = ["ConversationAffinityRouter", "affinity_ranks", "in_flight", "last_route"]

DEFAULT_AFFINITY_LIMIT = 32


def affinity_ranks(
    preferred: str | None, loads: Mapping[str, int | None], limit: int, candidates: Sequence[str]
) -> list[list[str]]:
    """The replicas to try, best rank first (pure: the router's whole policy).

    Args:
        preferred: the replica that served the conversation last (or the ring's pick), if any.
        loads: requests in flight per replica as last seen (None or absent: not known yet).
        limit: from this many requests in flight on, the preferred replica counts as overloaded.
        candidates: every running replica, in the order ties should be broken.

    Returns:
        ``[[preferred], rest]`` while the preferred replica is not overloaded (the rest is the
        fallback should it refuse); when it is, first the replicas that are (or may be) less
        loaded than it, then all of them: the least loaded of a rank is chosen.
    """
    everyone = list(candidates)
    if preferred is None or preferred not in everyone:
        return [everyone] if everyone else []
    rest = [c for c in everyone if c != preferred]
    load = loads.get(preferred)
    if load is None or load < limit:
        return [[preferred], rest] if rest else [[preferred]]
    lighter = [c for c in rest if (other := loads.get(c)) is None or other < load]
    return [lighter, everyone] if lighter else [everyone]


class ConversationAffinityRouter(ConsistentHashRouter):
    """Serve request router: a conversation stays on its replica unless that replica is busy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]  # Ray: untyped
        self._affinity_limit = DEFAULT_AFFINITY_LIMIT
        self._sessions = llm_routes.RouteLog()

    def initialize_state(self, **kwargs: Any) -> None:
        """Serve passes ``request_router_kwargs`` here after construction."""
        self._affinity_limit = int(kwargs.pop("max_ongoing_for_affinity", DEFAULT_AFFINITY_LIMIT))
        super().initialize_state(**kwargs)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        session = pending_request.metadata.session_id if pending_request is not None else ""
        preferred = self._preferred(session) if session else None
        loads = {u: self._load(u, r) for u, r in by_id.items()}
        # Shuffled so that equally loaded replicas share the fallback and session-less requests.
        ids = random.sample(list(by_id), len(by_id))
        ranks = affinity_ranks(preferred, loads, self._affinity_limit, ids)
        return [[by_id[unique_id] for unique_id in rank] for rank in ranks]

    def _load(self, unique_id: str, replica: RunningReplica) -> int | None:
        # This process's own count is exact; Serve's queue-length cache is a sample, reset by
        # each acceptance reply, which reports the replica's load before the new request.
        cached = self._replica_queue_len_cache.get(replica.replica_id)
        mine = llm_routes.IN_FLIGHT.count(unique_id)
        return max(cached, mine) if cached is not None else (mine or None)

    def _preferred(self, session: str) -> str | None:
        remembered = self._sessions.get(session)
        if remembered is not None and any(
            r.unique_id == remembered for r in self._replica_set_snapshot
        ):
            return remembered
        ring = self._lookup_ranked_replicas(session)
        return ring[0].unique_id if ring else None

    def _fulfill_next_pending_request(
        self, replica: RunningReplica, request_metadata: RequestMetadata | None = None
    ) -> None:
        # The one place where a request and its replica meet, whatever rank it came from.
        unique_id = replica.replica_id.unique_id
        if request_metadata is not None:
            llm_routes.IN_FLIGHT.started(request_metadata.internal_request_id, unique_id)
            if request_metadata.session_id:
                self._sessions.record(request_metadata.session_id, unique_id)
                llm_routes.ROUTES.record(request_metadata.session_id, unique_id)
        super()._fulfill_next_pending_request(replica, request_metadata)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        llm_routes.IN_FLIGHT.finished(internal_request_id)
        super().on_request_completed(replica_id, internal_request_id)
