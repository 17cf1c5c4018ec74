"""Reading a conversation's bundle from the store, and writing an imported one (one transaction).

The import writes a new conversation's row, its turns, messages, moves, model calls and its
whole log (``core.conversation_bundle.plan_import``) in one transaction, before any actor exists
for it: the conversation's id is new, so no writer lease can be held on it yet, and whoever
creates a conversation writes its first events with its row (``actors.conversation.log``). From
the first message on, the conversation's actor is its log's one writer, as for any other.
"""

from __future__ import annotations

from sqlalchemy import Connection

from core.conversation_bundle import (
    MAX_CALLS,
    MAX_MESSAGES,
    MAX_MOVES,
    MAX_TURNS,
    ConversationBundle,
    ImportPlan,
    bundle_of,
)
from core.domain import Move
from core.errors import InvalidInput
from core.ids import utc_now
from core.memory.objects import ObjectStore
from core.record_sink import load_bodies
from core.store import Store


def export_bundle(
    store: Store, conversation_id: str, client_id: str, objects: ObjectStore | None
) -> ConversationBundle:
    """The conversation's bundle (``NotFound`` unless ``client_id`` owns it; ``InvalidInput``
    when it holds more than a bundle may)."""
    conversation = store.conversations.get(conversation_id, client_id=client_id)
    turns = store.turns.list(conversation_id)
    if len(turns) > MAX_TURNS:
        raise InvalidInput(f"the conversation has {len(turns)} turns; a bundle holds {MAX_TURNS}")
    messages = store.messages.list(conversation_id, limit=MAX_MESSAGES + 1)
    if len(messages) > MAX_MESSAGES:
        raise InvalidInput(f"the conversation has over {MAX_MESSAGES} messages, a bundle's most")
    moves: list[Move] = []
    for turn in turns:
        moves.extend(store.moves.list(turn.id))
    if len(moves) > MAX_MOVES:
        raise InvalidInput(f"the conversation has {len(moves)} moves; a bundle holds {MAX_MOVES}")
    calls = store.records.calls(conversation_id=conversation_id, limit=MAX_CALLS + 1)
    if len(calls) > MAX_CALLS:
        raise InvalidInput(f"the conversation has over {MAX_CALLS} model calls, a bundle's most")
    calls = [load_bodies(c, objects) for c in calls]
    return bundle_of(conversation, turns, messages, moves, calls, utc_now())


def write_import(store: Store, plan: ImportPlan, conn: Connection) -> None:
    """The imported conversation's rows and log, inside the caller's transaction."""
    store.conversations.insert(plan.conversation, conn)
    for event in plan.events:
        store.events.append(event, conn)
    for turn in plan.turns:
        store.turns.insert(turn, conn)
    for message in plan.messages:
        store.messages.insert(message, conn)
    for move in plan.moves:
        store.moves.insert(move, conn)
    store.records.insert_calls(plan.model_calls, conn)
