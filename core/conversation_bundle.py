"""A conversation as one JSON bundle, and the plan to import one, pure (docs/observability.md).

A bundle holds a conversation, its ended turns, their messages, moves and model calls
(``GET /v1/conversations/{id}/export``). Importing it (``POST /v1/conversation-imports``) makes
a new conversation of the importing client with the same history: every id is new (the bundle's
ids only say what refers to what, so two imports of one bundle, or a bundle from another
deployment, never collide with anything stored), agent ids the importing client does not own are
dropped or replaced by the agent it names, and the conversation's log is rebuilt from the rows
(``conversation_started``, then each turn's ``turn.started``, messages, moves and end) to be
written once, by the import, before any actor exists for the conversation (``core.
conversation_bundle_store``). Only ended turns travel: a turn still running has no answer yet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import Field

from core.domain import (
    Caller,
    Conversation,
    ConversationStatus,
    Event,
    Message,
    Model,
    Move,
    Participant,
    Turn,
    TurnStatus,
    UserCaller,
)
from core.errors import InvalidInput
from core.jsontypes import JsonObject
from core.model_calls import CallSource, ModelCallRecord

FORMAT = "wonder.conversation/1"
MAX_TURNS = 2_000
MAX_MESSAGES = 10_000
MAX_MOVES = 20_000
MAX_CALLS = 10_000
IMPORTED_USER = "imported"
"""The user a turn works for when the bundle's turn was started by an agent or a workflow of the
exporting side (their ids mean nothing here)."""

IdMaker = Callable[[str, str | None], str]
"""``(prefix, earlier)`` → a new id sorting after ``earlier`` (``core.ids.new_id_after``)."""


class ConversationBundle(Model):
    """One conversation's history as exported: its row, ended turns, messages, moves and model
    calls (request and response bodies inline)."""

    format: Literal["wonder.conversation/1"] = "wonder.conversation/1"
    exported_at: datetime
    conversation: Conversation
    turns: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS)
    messages: list[Message] = Field(default_factory=list, max_length=MAX_MESSAGES)
    moves: list[Move] = Field(default_factory=list, max_length=MAX_MOVES)
    model_calls: list[ModelCallRecord] = Field(default_factory=list, max_length=MAX_CALLS)


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What an import writes, in one transaction: rows and the log that announces them."""

    conversation: Conversation
    turns: list[Turn]
    messages: list[Message]
    moves: list[Move]
    model_calls: list[ModelCallRecord]
    events: list[Event]
    turn_ids: dict[str, str]
    """The bundle's turn ids → the imported turns' (the answer says so)."""


def bundle_of(
    conversation: Conversation,
    turns: Sequence[Turn],
    messages: Sequence[Message],
    moves: Sequence[Move],
    calls: Sequence[ModelCallRecord],
    at: datetime,
) -> ConversationBundle:
    """The bundle of a conversation's ended turns (a running turn's rows stay out)."""
    ended = [t for t in turns if _ended(t)]
    kept = {t.id for t in ended}
    return ConversationBundle(
        exported_at=at,
        conversation=conversation,
        turns=ended,
        messages=[m for m in messages if m.turn_id in kept],
        moves=[m for m in moves if m.turn_id in kept],
        model_calls=[c for c in calls if c.source.turn_id in kept],
    )


def check_bundle(bundle: ConversationBundle) -> None:
    """``InvalidInput`` naming the first inconsistency: a duplicated id, a row of another
    conversation or of a turn the bundle lacks, a turn still running."""
    conversation_id = bundle.conversation.id
    _unique("turns", [t.id for t in bundle.turns])
    _unique("messages", [m.id for m in bundle.messages])
    _unique("moves", [m.id for m in bundle.moves])
    _unique("model_calls", [c.id for c in bundle.model_calls])
    turn_ids = {t.id for t in bundle.turns}
    for n, turn in enumerate(bundle.turns):
        if turn.conversation_id != conversation_id:
            raise InvalidInput(f"turns[{n}]: belongs to another conversation than the bundle's")
        if not _ended(turn):
            raise InvalidInput(f"turns[{n}]: still running (only ended turns are imported)")
    for n, message in enumerate(bundle.messages):
        if message.conversation_id != conversation_id:
            raise InvalidInput(f"messages[{n}]: belongs to another conversation")
        if message.turn_id not in turn_ids:
            raise InvalidInput(f"messages[{n}]: names a turn the bundle does not hold")
    for n, move in enumerate(bundle.moves):
        if move.turn_id not in turn_ids:
            raise InvalidInput(f"moves[{n}]: names a turn the bundle does not hold")
    for n, call in enumerate(bundle.model_calls):
        if call.source.turn_id not in turn_ids:
            raise InvalidInput(f"model_calls[{n}]: names a turn the bundle does not hold")


def plan_import(
    bundle: ConversationBundle,
    *,
    client_id: str,
    conversation_id: str,
    agent_id: str | None,
    own_agents: Collection[str],
    title: str | None,
    at: datetime,
    ids: IdMaker,
) -> ImportPlan:
    """The rows and log of the imported conversation (``bundle`` checked by ``check_bundle``).

    ``agent_id``: the importing client's agent that answers from now on (default: the bundle's,
    when the importing client owns an agent of that id). ``own_agents``: the agent ids the
    importing client owns; any other agent id of the bundle is dropped (a participant) or
    replaced by ``agent_id`` (a turn's)."""
    source = bundle.conversation
    primary = agent_id if agent_id is not None else _own(source.agent_id, own_agents)
    participants = _participants(source.participants, primary, own_agents)
    conversation = Conversation(
        id=conversation_id,
        client_id=client_id,
        agent_id=primary,
        participants=participants,
        status=ConversationStatus.ACTIVE,
        title=title if title is not None else source.title,
        concurrency_policy=source.concurrency_policy,
        created_at=at,
    )
    turn_ids: dict[str, str] = {}
    last: str | None = None
    for turn in sorted(bundle.turns, key=lambda t: (t.created_at, t.id)):
        last = turn_ids[turn.id] = ids("turn", last)
    by_turn: dict[str, list[Message]] = {}
    for message in sorted(bundle.messages, key=lambda m: (m.seq, m.created_at, m.id)):
        by_turn.setdefault(message.turn_id, []).append(message)
    moves_of: dict[str, list[Move]] = {}
    for move in sorted(bundle.moves, key=lambda m: (m.sequence, m.created_at, m.id)):
        moves_of.setdefault(move.turn_id, []).append(move)

    events = [_event(conversation_id, 1, "conversation_started", _started(conversation), at)]
    turns: list[Turn] = []
    messages: list[Message] = []
    moves: list[Move] = []
    last_message: str | None = None
    last_move: str | None = None
    for old in sorted(bundle.turns, key=lambda t: turn_ids[t.id]):
        turn = old.model_copy(
            update={
                "id": turn_ids[old.id],
                "conversation_id": conversation_id,
                "agent_id": _own(old.agent_id, own_agents) or primary,
                "parent_turn_id": None,
                "caller": _caller(old.caller, old.user_id),
                "reply_to_message_id": None,
                "context_assembly_run_id": None,
                "memory_extraction_run_id": None,
                "issues": old.issues.model_copy(update={"memory_extraction_pending": False}),
            }
        )
        turns.append(turn)
        events.append(_event(conversation_id, len(events) + 1, "turn.started", _turn(turn), at))
        for message in by_turn.get(old.id, []):
            last_message = ids("msg", last_message)
            copied = message.model_copy(
                update={
                    "id": last_message,
                    "conversation_id": conversation_id,
                    "turn_id": turn.id,
                    "seq": len(events) + 1,
                }
            )
            messages.append(copied)
            payload: JsonObject = {"message": copied.model_dump(mode="json")}
            events.append(_event(conversation_id, copied.seq, "message", payload, at))
        for move in moves_of.get(old.id, []):
            last_move = ids("move", last_move)
            copied_move = move.model_copy(update={"id": last_move, "turn_id": turn.id})
            moves.append(copied_move)
            payload = {"turn_id": turn.id, "move": copied_move.model_dump(mode="json")}
            events.append(_event(conversation_id, len(events) + 1, "move", payload, at))
        end: JsonObject = _turn(turn)
        if turn.status is TurnStatus.FAILED:
            end["reason"] = turn.failure_reason or ""
        kind = "turn.completed" if turn.status is TurnStatus.COMPLETED else "turn.failed"
        events.append(_event(conversation_id, len(events) + 1, kind, end, at))

    calls: list[ModelCallRecord] = []
    last_call: str | None = None
    for call in sorted(bundle.model_calls, key=lambda c: (c.created_at, c.id)):
        last_call = ids("call", last_call)
        old_turn = call.source.turn_id or ""
        source_of = CallSource(
            client_id=client_id,
            conversation_id=conversation_id,
            turn_id=turn_ids[old_turn],
            agent_id=_own(call.source.agent_id, own_agents) or primary,
            hook=call.source.hook,
            step=call.source.step,
        )
        calls.append(
            call.model_copy(
                update={
                    "id": last_call,
                    "source": source_of,
                    "profile_id": None,
                    "request_ref": None,
                    "response_ref": None,
                    "trace_id": None,
                    "span_id": None,
                }
            )
        )
    return ImportPlan(conversation, turns, messages, moves, calls, events, turn_ids)


def _ended(turn: Turn) -> bool:
    return turn.status is not TurnStatus.ACTIVE and not turn.awaiting_operations


def _unique(what: str, values: list[str]) -> None:
    seen: set[str] = set()
    for n, value in enumerate(values):
        if value in seen:
            raise InvalidInput(f"{what}[{n}]: id {value[:80]!r} appears twice in the bundle")
        seen.add(value)


def _own(agent_id: str | None, own_agents: Collection[str]) -> str | None:
    return agent_id if agent_id is not None and agent_id in own_agents else None


def _participants(
    participants: Sequence[Participant], primary: str | None, own_agents: Collection[str]
) -> list[Participant]:
    kept = [p for p in participants if p.type != "agent" or p.id in own_agents]
    if primary is not None and not any(p.type == "agent" and p.id == primary for p in kept):
        kept.append(Participant(type="agent", id=primary))
    return kept


def _caller(caller: Caller, user_id: str | None) -> Caller:
    """A user's turn keeps its user; one started by an agent or a workflow of the exporting
    side is attributed to its user, or ``IMPORTED_USER`` (their ids name nothing here)."""
    if isinstance(caller, UserCaller):
        return caller
    return UserCaller(user_id=user_id or IMPORTED_USER)


def _started(conversation: Conversation) -> JsonObject:
    return {
        "agent_id": conversation.agent_id,
        "title": conversation.title,
        "participants": [p.model_dump() for p in conversation.participants],
        "started_by_conversation_id": None,
        "started_by_message_id": None,
        "imported": True,
    }


def _turn(turn: Turn) -> JsonObject:
    return {
        "turn_id": turn.id,
        "status": turn.status.value,
        "failure_reason": turn.failure_reason,
        "issues": turn.issues.model_dump(),
        "usage": turn.usage.model_dump(),
    }


def _event(conversation_id: str, seq: int, kind: str, payload: JsonObject, at: datetime) -> Event:
    return Event(conversation_id=conversation_id, seq=seq, type=kind, payload=payload, at=at)
