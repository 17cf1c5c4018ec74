"""A conversation's history as clients read it: messages, turns and events, a fork's inherited
entries included and marked (``inherited_from``), paged forward (``after_seq``) or backward
(``before_seq``, or ``tail=true`` for the newest page).

Forward pages are oldest first; backward pages are the newest entries before ``before_seq``,
also returned oldest first (prepend them), with ``older_before_seq`` to fetch the page before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query
from pydantic import Field

from core.domain import Message, Turn
from core.event_order import event_frame
from core.route_model import MessageRoute
from core.store import Store
from core.store.forks import Seen
from core.turn_filters import TurnFilter, select_turns
from core.turn_model import TurnModel
from serving.gateway.protocol import WireModel

T = TypeVar("T")

AfterSeq = Annotated[
    int | None, Query(ge=0, description="Forward: entries with seq > after_seq (default 0)")
]
BeforeSeq = Annotated[
    int | None,
    Query(ge=1, description="Backward: the newest entries with seq < before_seq"),
]
Tail = Annotated[
    bool, Query(description="Backward from the end: the newest `limit` entries (a tail page)")
]


class MessageOut(Message):
    inherited_from: str | None = Field(
        None, description="For a fork: the conversation this inherited message was written in"
    )
    route: MessageRoute | None = Field(
        None,
        description="How the message was routed here (smart routing's candidates and scores) "
        "and the permissions it gave its turn, when it was",
    )


class TurnOut(Turn):
    inherited_from: str | None = Field(
        None, description="For a fork: the conversation this inherited turn ran in"
    )
    model: TurnModel | None = Field(
        None, description="The message's model override and the profile the turn used (if any)"
    )


class SeqPage(WireModel, Generic[T]):
    items: list[T]
    older_before_seq: int | None = Field(
        None,
        description="Backward pages: pass as before_seq for the page before this one "
        "(null: this page starts at the beginning)",
    )


@dataclass(frozen=True)
class SeqWindow:
    """Which entries a page holds: forward from ``after_seq`` or backward before ``before_seq``
    (``None``: from the end)."""

    after_seq: int
    before_seq: int | None
    backward: bool
    limit: int


def seq_window(after_seq: int | None, before_seq: int | None, tail: bool, limit: int) -> SeqWindow:
    """The page asked for: ``after_seq`` and ``before_seq`` bound the range; ``before_seq`` or
    ``tail`` make it a backward page (the newest ``limit`` entries of the range)."""
    backward = before_seq is not None or tail
    return SeqWindow(after_seq or 0, before_seq, backward, limit)


def _older(window: SeqWindow, seqs: list[int]) -> int | None:
    """``before_seq`` of the previous page of a backward listing (None at the beginning)."""
    if not window.backward or len(seqs) < window.limit:
        return None
    return min(seqs)


def _inherited(seen: Seen) -> dict[str, Any]:
    return {"inherited_from": seen.inherited_from}


def message_page(store: Store, conversation_id: str, window: SeqWindow) -> SeqPage[MessageOut]:
    found = store.forks.messages(
        conversation_id,
        after_seq=window.after_seq,
        before_seq=window.before_seq,
        limit=window.limit,
        newest_first=window.backward,
    )
    routes = store.message_routes.for_messages([m.id for m, _ in found])
    items = [
        MessageOut.model_validate(
            {
                **m.model_dump(),
                "conversation_id": conversation_id,
                "route": routes.get(m.id),
                **_inherited(s),
            }
        )
        for m, s in sorted(found, key=lambda pair: pair[0].seq)
    ]
    return SeqPage[MessageOut](items=items, older_before_seq=_older(window, [m.seq for m in items]))


def event_page(store: Store, conversation_id: str, window: SeqWindow) -> dict[str, Any]:
    found = store.forks.events(
        conversation_id,
        after_seq=window.after_seq,
        before_seq=window.before_seq,
        limit=window.limit,
        newest_first=window.backward,
    )
    frames = [
        visible_frame(conversation_id, event_frame(e), s)
        for e, s in sorted(found, key=lambda pair: pair[0].seq)
    ]
    return {
        "items": frames,
        "older_before_seq": _older(window, [int(f["seq"]) for f in frames]),
    }


def visible_frame(conversation_id: str, frame: dict[str, Any], seen: Seen) -> dict[str, Any]:
    """An event frame as the fork reads it: its conversation, and where it was inherited from."""
    if seen.inherited_from is None:
        return frame
    return {**frame, "conversation_id": conversation_id, "inherited_from": seen.inherited_from}


def turn_list(store: Store, conversation_id: str) -> list[TurnOut]:
    return _turns_out(store, conversation_id, store.forks.turns(conversation_id))


def _turns_out(store: Store, conversation_id: str, found: list[tuple[Turn, Seen]]) -> list[TurnOut]:
    models = store.turn_models.for_turns([turn.id for turn, _seen in found])
    return [
        TurnOut.model_validate(
            {
                **turn.model_dump(),
                "conversation_id": conversation_id,
                "model": models.get(turn.id),
                **_inherited(seen),
            }
        )
        for turn, seen in found
    ]


def turn_page(
    store: Store,
    conversation_id: str,
    where: TurnFilter,
    after: tuple[datetime, str] | None,
    limit: int,
) -> tuple[list[TurnOut], bool]:
    """The visible turns (a fork's inherited ones included) matching ``where``, oldest first,
    after ``after`` (created_at, id); and whether more follow."""
    found = [
        (turn, seen)
        for turn, seen in store.forks.turns(conversation_id)
        if after is None or (turn.created_at, turn.id) > after
    ]
    found.sort(key=lambda pair: (pair[0].created_at, pair[0].id))
    tools = store.moves.tools_called([t.id for t, _ in found]) if where.needs_tools else {}
    kept = {t.id for t in select_turns([t for t, _ in found], tools, where)}
    chosen = [(t, s) for t, s in found if t.id in kept]
    return _turns_out(store, conversation_id, chosen[:limit]), len(chosen) > limit
