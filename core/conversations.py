"""Creating a conversation: its row and its first event, ``conversation_started`` (seq 1), together.

Whoever creates a conversation (the gateway for a user, a Conversation actor for a delegated child)
writes both in one transaction, so a conversation never exists without the event that announces it
and the actor that later owns it can continue numbering events from the store.
"""

from __future__ import annotations

from datetime import datetime

from core.domain import Conversation, Event, Participant
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.store import Store

CONVERSATION_STARTED = "conversation_started"


def started_event(conversation: Conversation) -> Event:
    """The ``conversation_started`` event (seq 1) that announces ``conversation``."""
    payload: JsonObject = {
        "agent_id": conversation.agent_id,
        "title": conversation.title,
        "participants": [p.model_dump() for p in conversation.participants],
        "started_by_conversation_id": conversation.started_by_conversation_id,
        "started_by_message_id": conversation.started_by_message_id,
    }
    return Event(
        conversation_id=conversation.id,
        seq=1,
        type=CONVERSATION_STARTED,
        payload=payload,
        at=conversation.created_at,
    )


def create_conversation(
    store: Store,
    *,
    client_id: str,
    agent_id: str | None = None,
    title: str | None = None,
    participants: list[Participant] | None = None,
    started_by_conversation_id: str | None = None,
    started_by_message_id: str | None = None,
    depth: int = 0,
    conversation_id: str | None = None,
    created_at: datetime | None = None,
    project_id: str | None = None,
    branch: str | None = None,
) -> Conversation:
    """Write a new conversation and its ``conversation_started`` event in one transaction.

    Args:
        store: the relational store.
        client_id: the client that owns the conversation.
        agent_id: the primary agent, if any; it becomes a participant.
        title: an optional display title.
        participants: explicit participants; default: the primary agent (if any).
        started_by_conversation_id: the parent, for a child conversation started by delegation.
        started_by_message_id: the parent's message that started it.
        depth: delegation depth (0 for a root conversation).
        conversation_id: a chosen id (default: a new ``conv_`` ULID).
        created_at: the creation time (default: now, UTC).
        project_id: the project the conversation works on (see ``core.projects``).
        branch: its working branch in that project's repository.

    Returns:
        The stored conversation.
    """
    if participants is None:
        participants = [Participant(type="agent", id=agent_id)] if agent_id else []
    conversation = Conversation(
        id=conversation_id or new_id("conv"),
        client_id=client_id,
        agent_id=agent_id,
        participants=participants,
        title=title,
        started_by_conversation_id=started_by_conversation_id,
        started_by_message_id=started_by_message_id,
        depth=depth,
        project_id=project_id,
        branch=branch,
        created_at=created_at or utc_now(),
    )
    with store.db.begin() as conn:
        store.conversations.insert(conversation, conn=conn)
        store.events.append(started_event(conversation), conn=conn)
        if started_by_conversation_id is not None:  # a child: the parent's users keep access
            store.members.copy(
                started_by_conversation_id, conversation.id, conversation.created_at, conn
            )
    return conversation
