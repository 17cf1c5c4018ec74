"""Forks (seed 003): a new conversation whose visible history is its source's up to a turn.

The fork turn is included: a fork made at turn T sees every turn of the source created up to and
including T (turn ids are ULIDs, so creation order), with the messages and events the store held
for them when the fork was made. Nothing is copied (``core.store.forks``): the fork records its
lineage, and reads compose the inherited entries with its own. A turn still running cannot be
forked at (its answer is not there yet): ``Conflict``.

A fork is not a child conversation: it has no ``started_by_*``, memberships are not copied
(it belongs to the same client and agent as its source).
"""

from __future__ import annotations

from core.access import Level
from core.conversations import CONVERSATION_STARTED
from core.domain import Conversation, Event, Message, TurnStatus
from core.errors import Conflict, NotFound
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.store import Store
from core.store.forks import Segment


def fork_conversation(
    store: Store,
    source: Conversation,
    turn_id: str,
    *,
    title: str | None = None,
    conversation_id: str | None = None,
    owner: str | None = None,
) -> Conversation:
    """Write a fork of ``source`` at ``turn_id``: its row, its lineage, its
    ``conversation_started`` event (numbered after the inherited seqs) and, when a user forks,
    that user as the fork's owner (forks do not copy the source's members), in one transaction.

    Raises ``NotFound`` when ``turn_id`` is not a turn visible in ``source`` and
    ``Conflict`` when that turn is still running."""
    found = store.forks.turn(source.id, turn_id)
    if found is None:
        raise NotFound(f"turn_id: turn {turn_id} is not in conversation {source.id}")
    turn, _seen = found
    if turn.status is TurnStatus.ACTIVE:
        raise Conflict(f"turn {turn_id} is still running; fork at it once it has ended")
    fork = Conversation(
        id=conversation_id or new_id("conv"),
        client_id=source.client_id,
        agent_id=source.agent_id,
        participants=list(source.participants),
        title=title if title is not None else source.title,
        forked_from_conversation_id=source.id,
        forked_at_turn_id=turn_id,
        concurrency_policy=source.concurrency_policy,
        created_at=utc_now(),
    )
    with store.db.begin() as conn:
        last_seq = store.events.next_seq(source.id, conn) - 1
        inherited = [
            segment.model_copy(update={"last_turn_id": min(segment.last_turn_id, turn_id)})
            for segment in store.forks.lineage(source.id, conn)
        ]
        lineage = [
            *inherited,
            Segment(conversation_id=source.id, last_turn_id=turn_id, last_seq=last_seq),
        ]
        store.conversations.insert(fork, conn=conn)
        store.forks.insert(fork, lineage, conn)
        if owner is not None:
            store.members.grant(fork.id, owner, Level.OWNER, fork.created_at, owner, conn)
        payload: JsonObject = {
            "agent_id": fork.agent_id,
            "title": fork.title,
            "participants": [p.model_dump() for p in fork.participants],
            "forked_from_conversation_id": source.id,
            "forked_at_turn_id": turn_id,
        }
        store.events.append(
            Event(
                conversation_id=fork.id,
                seq=last_seq + 1,
                type=CONVERSATION_STARTED,
                payload=payload,
                at=fork.created_at,
            ),
            conn=conn,
        )
    return fork


def latest_turn_id(store: Store, conversation_id: str) -> str | None:
    """The newest turn visible in the conversation (a fresh fork's: the turn it forks at)."""
    own = store.turns.list(conversation_id, last=1)
    if own:
        return own[-1].id
    lineage = store.forks.lineage(conversation_id)
    return lineage[-1].last_turn_id if lineage else None


def recent_turn_ids_visible(store: Store, conversation_id: str, last: int) -> list[str]:
    """The ids of the newest ``last`` turns visible in the conversation, oldest first (a fork's
    inherited turns count as its own)."""
    if not store.forks.lineage(conversation_id):
        return list(store.turns.recent_ids(conversation_id, last))
    return [turn.id for turn, _seen in store.forks.turns(conversation_id)][-last:]


def messages_of_turns(store: Store, conversation_id: str, turn_ids: list[str]) -> list[Message]:
    """The messages of these visible turns in seq order (inherited ones of a fork included)."""
    if not store.forks.lineage(conversation_id):
        return store.messages.list(conversation_id, turn_ids=turn_ids)
    return [m for m, _seen in store.forks.messages(conversation_id, turn_ids=turn_ids)]
