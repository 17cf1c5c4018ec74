"""A conversation's events as a subscriber receives them: wire frames, their order by ``seq``,
and the token deltas of replies in flight.

Durable events are numbered per conversation (``seq``, gap-free) and stored before anyone hears of
them; token deltas (``seq`` None) are streamed, never stored. A subscriber may hear of durable
events late, twice, or out of order (several writers, a publish lost with its process): ``SeqOrder``
passes each durable event once, in order, and names the seqs to read from the store first.
``PartialReplies`` keeps the tokens of each reply not yet stored, for a subscriber that arrives
mid-reply. No I/O here except ``visible_frames``, the one store read every catch-up uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.domain import Event
from core.jsontypes import JsonObject
from core.store import Store

PAGE = 1000  # events per store read when replaying


def event_frame(event: Event) -> JsonObject:
    """A stored event in the wire shape of the stream: ``{seq, type, at, conversation_id, ...}``
    (the payload cannot shadow those four)."""
    return {
        **event.payload,
        "seq": event.seq,
        "type": event.type,
        "at": event.at.isoformat(),
        "conversation_id": event.conversation_id,
    }


def token_frame(conversation_id: str, turn_id: str, delta: str) -> JsonObject:
    """A streamed token delta (not stored: ``seq`` None)."""
    return {
        "seq": None,
        "type": "token",
        "conversation_id": conversation_id,
        "turn_id": turn_id,
        "delta": delta,
    }


def visible_frames(
    store: Store, conversation_id: str, after_seq: int, before_seq: int | None = None
) -> list[JsonObject]:
    """The conversation's stored events with ``after_seq < seq < before_seq`` as frames, in
    order; a fork's inherited ones included and marked ``inherited_from`` (a fork's visible seqs
    skip the source's entries it does not inherit)."""
    frames: list[JsonObject] = []
    low = after_seq
    while True:
        page = store.forks.events(conversation_id, after_seq=low, before_seq=before_seq, limit=PAGE)
        for event, seen in page:
            frame = event_frame(event)
            if seen.inherited_from is not None:
                frame = {
                    **frame,
                    "conversation_id": conversation_id,
                    "inherited_from": seen.inherited_from,
                }
            frames.append(frame)
        if len(page) < PAGE:
            return frames
        low = page[-1][0].seq


def durable_seq(frame: JsonObject) -> int | None:
    seq = frame.get("seq")
    return int(seq) if isinstance(seq, int) else None


@dataclass
class SeqOrder:
    """What one subscriber has been handed: durable events pass once, in order; token deltas
    always pass. A durable event beyond ``last_seq + 1`` means the seqs between were not heard
    of: they are read from the store (``missing_before``) and handed out first."""

    last_seq: int = 0

    def is_old(self, frame: JsonObject) -> bool:
        seq = durable_seq(frame)
        return seq is not None and seq <= self.last_seq

    def missing_before(self, frame: JsonObject) -> range:
        """Seqs skipped before ``frame`` (empty when none)."""
        seq = durable_seq(frame)
        if seq is None or seq <= self.last_seq + 1:
            return range(0)
        return range(self.last_seq + 1, seq)

    def saw(self, frame: JsonObject) -> None:
        seq = durable_seq(frame)
        if seq is not None and seq > self.last_seq:
            self.last_seq = seq


def lingers(frame: JsonObject) -> bool:
    """Whether a published frame may wait a few ms to travel with what follows it: a token delta
    may (the next delta, or its reply's stored ``message``, is usually a few ms behind, and the
    words are the same whenever they arrive); every other frame goes at once."""
    return frame.get("type") == "token" and frame.get("seq") is None


def coalesce(frames: list[JsonObject]) -> list[JsonObject]:
    """Merge consecutive token deltas of one turn into one frame (a subscriber that fell behind
    gets fewer, larger deltas instead of a backlog)."""
    merged: list[JsonObject] = []
    for frame in frames:
        last = merged[-1] if merged else None
        if (
            last is not None
            and frame.get("type") == "token"
            and last.get("type") == "token"
            and last.get("turn_id") == frame.get("turn_id")
        ):
            merged[-1] = {**last, "delta": str(last.get("delta", "")) + str(frame.get("delta", ""))}
        else:
            merged.append(frame)
    return merged


ENDS_A_REPLY = ("llm.retry", "turn.completed", "turn.failed")
STORES_A_REPLY = ("message", "move")
STALE_REPLY_S = 600.0  # a reply in flight with no token for this long was lost with its writer


@dataclass
class _Reply:
    deltas: list[str] = field(default_factory=list)
    touched: float = 0.0


def reply_turn(frame: JsonObject) -> str | None:
    """The turn whose reply in flight ``frame`` ends or stores (None: it touches none)."""
    kind = frame.get("type")
    if kind in ENDS_A_REPLY:
        return str(frame.get("turn_id"))
    if kind in STORES_A_REPLY:
        stored = frame.get("message") or frame.get("move") or {}
        return str(stored.get("turn_id")) if isinstance(stored, dict) else None
    return None


class PartialReplies:
    """The tokens of each reply in flight, per conversation and turn, until its words are stored
    (a ``message`` or a ``move``), its call starts over (``llm.retry``) or its turn ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._replies: dict[str, dict[str, _Reply]] = {}

    def observe(self, conversation_id: str, frame: JsonObject) -> None:
        if frame.get("type") == "token":
            turns = self._replies.setdefault(conversation_id, {})
            reply = turns.setdefault(str(frame.get("turn_id")), _Reply())
            reply.deltas.append(str(frame.get("delta") or ""))
            reply.touched = self._clock()
            return
        turn_id = reply_turn(frame)
        if turn_id is not None:
            self.close(conversation_id, [turn_id])

    def close(self, conversation_id: str, turn_ids: Iterable[str]) -> None:
        turns = self._replies.get(conversation_id)
        if turns is None:
            return
        for turn_id in turn_ids:
            turns.pop(turn_id, None)
        if not turns:
            del self._replies[conversation_id]

    def so_far(self, conversation_id: str) -> list[JsonObject]:
        """One token frame per reply in flight: its text so far."""
        turns = self._replies.get(conversation_id, {})
        return [
            token_frame(conversation_id, turn_id, "".join(reply.deltas))
            for turn_id, reply in turns.items()
            if reply.deltas
        ]

    def seed(self, conversation_id: str, frames: Iterable[JsonObject]) -> None:
        """Start from another holder's replies in flight (what a watch answered)."""
        for frame in frames:
            self.observe(conversation_id, frame)

    def forget(self, conversation_id: str) -> None:
        self._replies.pop(conversation_id, None)

    def prune(self) -> None:
        """Drop replies whose writer went silent long ago (a lost process, a deleted one)."""
        cutoff = self._clock() - STALE_REPLY_S
        for conversation_id in list(self._replies):
            stale = [t for t, r in self._replies[conversation_id].items() if r.touched < cutoff]
            self.close(conversation_id, stale)
