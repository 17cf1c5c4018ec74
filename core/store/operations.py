"""One operations class per entity: storage only, no business rules.

Every method takes an optional ``conn`` so a caller can group writes in one transaction
(``with store.db.begin() as conn: ...``); without it each call is its own transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection, and_, delete, func, insert, or_, select, update

from core.domain import (
    Agent,
    AsyncOperation,
    Client,
    Conversation,
    Event,
    Message,
    ModelProfile,
    Move,
    OperationStatus,
    Persona,
    TaskDef,
    Tool,
    Turn,
    TurnStatus,
)
from core.errors import NotFound
from core.store import schema
from core.store.audit import AuditOps
from core.store.client_secrets import ClientSecretOps
from core.store.database import Database, PoolLimits
from core.store.extractions import PendingExtractionOps
from core.store.forks import ForkOps
from core.store.hooks import HookOps
from core.store.keys import KeyOps
from core.store.library import LibraryOps, LibraryVersions
from core.store.mcp_servers import McpServerOps
from core.store.members import MemberOps
from core.store.memory_upkeep import MemoryUpkeepOps
from core.store.message_embeddings import MessageEmbeddingOps
from core.store.message_routes import MessageRouteOps
from core.store.model_calls import RecordOps
from core.store.ops_base import StoreOps
from core.store.projects import ProjectOps, WorkspaceOps
from core.store.quotas import AdminKeyOps, QuotaOps
from core.store.secrets import SecretOps
from core.store.session_labels import SessionLabelOps
from core.store.stream_tickets import StreamTicketOps
from core.store.triggers import TriggerOps
from core.store.turn_models import TurnModelOps
from core.store.workflow_runs import WorkflowRunOps
from core.store.writers import WriterLeaseOps
from core.workflows import WorkflowDef

M = TypeVar("M", bound=BaseModel)


def _ts(value: datetime) -> str:
    return value.isoformat()


def hash_api_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ClientOps(StoreOps):
    def insert(self, client: Client, conn: Connection | None = None) -> Client:
        with self._write(conn) as c:
            c.execute(insert(schema.clients).values(id=client.id, data=client.model_dump_json()))
        return client

    def get(self, client_id: str, conn: Connection | None = None) -> Client:
        with self._read(conn) as c:
            row = c.execute(select(schema.clients.c.data).where(schema.clients.c.id == client_id))
            found = row.scalar_one_or_none()
        if found is None:
            raise NotFound(f"client {client_id} not found")
        return Client.model_validate_json(found)

    def add_api_key(self, client_id: str, key: str, created_at: datetime) -> None:
        with self._write(None) as c:
            c.execute(
                insert(schema.api_keys).values(
                    key_hash=hash_api_key(key), client_id=client_id, created_at=_ts(created_at)
                )
            )

    def client_for_key(self, key: str) -> str | None:
        with self._read(None) as c:
            row = c.execute(
                select(schema.api_keys.c.client_id).where(
                    schema.api_keys.c.key_hash == hash_api_key(key)
                )
            )
            return row.scalar_one_or_none()


class AgentOps(StoreOps):
    def insert(self, agent: Agent, conn: Connection | None = None) -> Agent:
        with self._write(conn) as c:
            c.execute(
                insert(schema.agents).values(
                    id=agent.id, client_id=agent.client_id, data=agent.model_dump_json()
                )
            )
        return agent

    def get(
        self, agent_id: str, client_id: str | None = None, conn: Connection | None = None
    ) -> Agent:
        t = schema.agents
        query = select(t.c.data).where(t.c.id == agent_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self._read(conn) as c:
            found = c.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"agent {agent_id} not found")
        return Agent.model_validate_json(found)

    def list_for_client(self, client_id: str) -> list[Agent]:
        t = schema.agents
        with self._read(None) as c:
            rows = c.execute(select(t.c.data).where(t.c.client_id == client_id).order_by(t.c.id))
            return [Agent.model_validate_json(r) for r in rows.scalars()]

    def page(self, after_id: str | None = None, limit: int = 500) -> list[Agent]:
        """Every client's agents in id order, ``limit`` after ``after_id`` (the platform's
        sweeps: memory upkeep)."""
        t = schema.agents
        query = select(t.c.data).order_by(t.c.id).limit(limit)
        if after_id is not None:
            query = query.where(t.c.id > after_id)
        with self._read(None) as c:
            return [Agent.model_validate_json(r) for r in c.execute(query).scalars()]

    def save(self, agent: Agent) -> Agent:
        t = schema.agents
        with self._write(None) as c:
            changed = c.execute(
                update(t)
                .where(t.c.id == agent.id, t.c.client_id == agent.client_id)
                .values(data=agent.model_dump_json())
            ).rowcount
        if not changed:
            raise NotFound(f"agent {agent.id} not found")
        return agent


class ConversationOps(StoreOps):
    def insert(self, conv: Conversation, conn: Connection | None = None) -> Conversation:
        with self._write(conn) as c:
            c.execute(insert(schema.conversations).values(**self._row(conv)))
        return conv

    def save(self, conv: Conversation, conn: Connection | None = None) -> Conversation:
        t = schema.conversations
        with self._write(conn) as c:
            c.execute(update(t).where(t.c.id == conv.id).values(data=conv.model_dump_json()))
        return conv

    @staticmethod
    def _row(conv: Conversation) -> dict[str, Any]:
        return {
            "id": conv.id,
            "client_id": conv.client_id,
            "agent_id": conv.agent_id,
            "started_by_conversation_id": conv.started_by_conversation_id,
            "created_at": _ts(conv.created_at),
            "data": conv.model_dump_json(),
        }

    def get(
        self, conv_id: str, client_id: str | None = None, conn: Connection | None = None
    ) -> Conversation:
        t = schema.conversations
        query = select(t.c.data).where(t.c.id == conv_id)
        if client_id is not None:
            query = query.where(t.c.client_id == client_id)
        with self._read(conn) as c:
            found = c.execute(query).scalar_one_or_none()
        if found is None:
            raise NotFound(f"conversation {conv_id} not found")
        return Conversation.model_validate_json(found)

    def list(
        self,
        client_id: str,
        *,
        ancestry: str = "all",
        parent_id: str | None = None,
        limit: int = 50,
        after: tuple[str, str] | None = None,
        member: str | None = None,
        ids: Sequence[str] | None = None,
        newest_first: bool = False,
    ) -> list[Conversation]:
        """Conversations ordered by (created_at, id), after an optional cursor; with ``member``,
        only those that user is a member of; with ``ids``, only those."""
        t = schema.conversations
        query = select(t.c.data).where(t.c.client_id == client_id)
        if ids is not None:
            query = query.where(t.c.id.in_(list(ids)))
        if member is not None:
            members = schema.conversation_members
            query = query.where(
                t.c.id.in_(select(members.c.conversation_id).where(members.c.user_id == member))
            )
        if parent_id is not None:
            query = query.where(t.c.started_by_conversation_id == parent_id)
        elif ancestry == "roots":
            query = query.where(t.c.started_by_conversation_id.is_(None))
        elif ancestry == "children":
            query = query.where(t.c.started_by_conversation_id.is_not(None))
        if after is not None:
            created, last_id = after
            query = query.where(
                or_(t.c.created_at > created, and_(t.c.created_at == created, t.c.id > last_id))
            )
        if newest_first:
            query = query.order_by(t.c.created_at.desc(), t.c.id.desc())
        else:
            query = query.order_by(t.c.created_at, t.c.id)
        with self._read(None) as c:
            rows = c.execute(query.limit(limit)).scalars()
            return [Conversation.model_validate_json(r) for r in rows]


class TurnOps(StoreOps):
    def insert(self, turn: Turn, conn: Connection | None = None) -> Turn:
        with self._write(conn) as c:
            c.execute(
                insert(schema.turns).values(
                    id=turn.id,
                    conversation_id=turn.conversation_id,
                    status=turn.status.value,
                    created_at=_ts(turn.created_at),
                    data=turn.model_dump_json(),
                )
            )
        return turn

    def save(self, turn: Turn, conn: Connection | None = None) -> Turn:
        t = schema.turns
        with self._write(conn) as c:
            c.execute(
                update(t)
                .where(t.c.id == turn.id)
                .values(status=turn.status.value, data=turn.model_dump_json())
            )
        return turn

    def get(self, turn_id: str, conn: Connection | None = None) -> Turn:
        t = schema.turns
        with self._read(conn) as c:
            found = c.execute(select(t.c.data).where(t.c.id == turn_id)).scalar_one_or_none()
        if found is None:
            raise NotFound(f"turn {turn_id} not found")
        return Turn.model_validate_json(found)

    def list(
        self,
        conversation_id: str,
        *,
        status: TurnStatus | None = None,
        last: int | None = None,
        conn: Connection | None = None,
    ) -> list[Turn]:
        """Turns of a conversation in creation order; ``last`` keeps only the newest N."""
        t = schema.turns
        query = select(t.c.data).where(t.c.conversation_id == conversation_id)
        if status is not None:
            query = query.where(t.c.status == status.value)
        if last is not None:
            query = query.order_by(t.c.id.desc()).limit(last)
        else:
            query = query.order_by(t.c.id)
        with self._read(conn) as c:
            found = [Turn.model_validate_json(r) for r in c.execute(query).scalars()]
        return sorted(found, key=lambda turn: turn.id)

    def recent_ids(self, conversation_id: str, last: int) -> Sequence[str]:
        """The ids of the conversation's newest ``last`` turns, oldest first (no turn is read:
        a turn's context needs only which turns are recent)."""
        t = schema.turns
        query = (
            select(t.c.id)
            .where(t.c.conversation_id == conversation_id)
            .order_by(t.c.id.desc())
            .limit(last)
        )
        with self._read() as c:
            return sorted(c.execute(query).scalars())


class MessageOps(StoreOps):
    def insert(self, message: Message, conn: Connection | None = None) -> Message:
        with self._write(conn) as c:
            c.execute(
                insert(schema.messages).values(
                    id=message.id,
                    conversation_id=message.conversation_id,
                    turn_id=message.turn_id,
                    seq=message.seq,
                    data=message.model_dump_json(),
                )
            )
        return message

    def get(self, message_id: str, conn: Connection | None = None) -> Message:
        t = schema.messages
        with self._read(conn) as c:
            found = c.execute(select(t.c.data).where(t.c.id == message_id)).scalar_one_or_none()
        if found is None:
            raise NotFound(f"message {message_id} not found")
        return Message.model_validate_json(found)

    def list(
        self,
        conversation_id: str,
        *,
        turn_ids: list[str] | None = None,
        after_seq: int = 0,
        limit: int = 1000,
        conn: Connection | None = None,
    ) -> list[Message]:
        t = schema.messages
        query = select(t.c.data).where(t.c.conversation_id == conversation_id, t.c.seq > after_seq)
        if turn_ids is not None:
            query = query.where(t.c.turn_id.in_(turn_ids))
        query = query.order_by(t.c.seq).limit(limit)
        with self._read(conn) as c:
            return [Message.model_validate_json(r) for r in c.execute(query).scalars()]


class MoveOps(StoreOps):
    def insert(self, move: Move, conn: Connection | None = None) -> Move:
        with self._write(conn) as c:
            c.execute(
                insert(schema.moves).values(
                    id=move.id,
                    turn_id=move.turn_id,
                    sequence=move.sequence,
                    data=move.model_dump_json(),
                )
            )
        return move

    def count(self, turn_id: str, conn: Connection | None = None) -> int:
        """How many moves the turn has (the next move's sequence is this + 1)."""
        t = schema.moves
        with self._read(conn) as c:
            found = c.execute(
                select(func.count()).select_from(t).where(t.c.turn_id == turn_id)
            ).scalar_one()
        return int(found)

    def list(self, turn_id: str, conn: Connection | None = None) -> list[Move]:
        t = schema.moves
        query = select(t.c.data).where(t.c.turn_id == turn_id).order_by(t.c.sequence)
        with self._read(conn) as c:
            return [Move.model_validate_json(r) for r in c.execute(query).scalars()]

    def tools_called(self, turn_ids: Sequence[str]) -> dict[str, set[str]]:
        """The names of the tools each of ``turn_ids`` called (turns that called none are left
        out)."""
        t = schema.moves
        called: dict[str, set[str]] = {}
        with self._read(None) as c:
            for start in range(0, len(turn_ids), 500):
                chunk = list(turn_ids[start : start + 500])
                for raw in c.execute(select(t.c.data).where(t.c.turn_id.in_(chunk))).scalars():
                    move = Move.model_validate_json(raw)
                    if move.tool_call is not None:
                        called.setdefault(move.turn_id, set()).add(move.tool_call.name)
        return called


class EventOps(StoreOps):
    def append(self, event: Event, conn: Connection | None = None) -> Event:
        with self._write(conn) as c:
            c.execute(
                insert(schema.events).values(
                    conversation_id=event.conversation_id,
                    seq=event.seq,
                    type=event.type,
                    data=event.model_dump_json(),
                )
            )
        return event

    def next_seq(self, conversation_id: str, conn: Connection) -> int:
        """The first free ``seq`` of a conversation, inside a write transaction.

        Two writers of one conversation (its actor, an async-operations runner, the gateway) are
        serialised: SQLite's write transactions hold the database lock (``BEGIN IMMEDIATE``);
        PostgreSQL locks the conversation's row first. The numbers stay gap-free because a
        transaction that fails gives its numbers back with its rows.
        """
        if conn.dialect.name != "sqlite":
            conversations = schema.conversations
            conn.execute(
                select(conversations.c.id)
                .where(conversations.c.id == conversation_id)
                .with_for_update()
            )
        return self.last_seq(conversation_id, conn) + 1

    def last_seq(self, conversation_id: str, conn: Connection | None = None) -> int:
        t = schema.events
        with self._read(conn) as c:
            found = c.execute(
                select(func.max(t.c.seq)).where(t.c.conversation_id == conversation_id)
            ).scalar_one_or_none()
        return int(found or 0)

    def last_seqs(self, conversation_ids: Sequence[str]) -> dict[str, int]:
        """The last ``seq`` of each of these conversations (one read; absent: no events)."""
        t = schema.events
        query = (
            select(t.c.conversation_id, func.max(t.c.seq))
            .where(t.c.conversation_id.in_(list(conversation_ids)))
            .group_by(t.c.conversation_id)
        )
        with self._read(None) as c:
            return {str(row[0]): int(row[1]) for row in c.execute(query)}

    def list_of_types(self, conversation_id: str, types: Sequence[str]) -> list[Event]:
        """A conversation's events of the given types, in order (what recovery reads back)."""
        t = schema.events
        query = (
            select(t.c.data)
            .where(t.c.conversation_id == conversation_id, t.c.type.in_(list(types)))
            .order_by(t.c.seq)
        )
        with self._read(None) as c:
            return [Event.model_validate_json(r) for r in c.execute(query).scalars()]

    def list(self, conversation_id: str, after_seq: int = 0, limit: int = 10_000) -> list[Event]:
        t = schema.events
        query = (
            select(t.c.data)
            .where(t.c.conversation_id == conversation_id, t.c.seq > after_seq)
            .order_by(t.c.seq)
            .limit(limit)
        )
        with self._read(None) as c:
            return [Event.model_validate_json(r) for r in c.execute(query).scalars()]


class ContextOps(StoreOps):
    """Per-conversation working state (seed 003's context channel)."""

    def get(self, conversation_id: str, key: str) -> Any:
        t = schema.context_entries
        with self._read(None) as c:
            found = c.execute(
                select(t.c.value).where(t.c.conversation_id == conversation_id, t.c.key == key)
            ).scalar_one_or_none()
        return None if found is None else json.loads(found)

    def set(self, conversation_id: str, key: str, value: Any) -> None:
        t = schema.context_entries
        with self._write(None) as c:
            c.execute(delete(t).where(t.c.conversation_id == conversation_id, t.c.key == key))
            c.execute(
                insert(t).values(conversation_id=conversation_id, key=key, value=json.dumps(value))
            )

    def entries(self, conversation_id: str, limit: int = 1000) -> dict[str, Any]:
        """Every entry of the conversation's context, by key (in key order)."""
        t = schema.context_entries
        query = (
            select(t.c.key, t.c.value)
            .where(t.c.conversation_id == conversation_id)
            .order_by(t.c.key)
            .limit(limit)
        )
        with self._read(None) as c:
            return {key: json.loads(value) for key, value in c.execute(query)}

    def count(self, conversation_id: str) -> int:
        t = schema.context_entries
        query = select(func.count()).where(t.c.conversation_id == conversation_id)
        with self._read(None) as c:
            return int(c.execute(query).scalar_one())

    def delete(self, conversation_id: str, key: str) -> bool:
        """Remove one entry; False when there was none."""
        t = schema.context_entries
        with self._write(None) as c:
            gone = c.execute(
                delete(t).where(t.c.conversation_id == conversation_id, t.c.key == key)
            ).rowcount
        return bool(gone)


class AsyncOperationOps(StoreOps):
    def insert(self, op: AsyncOperation, conn: Connection | None = None) -> AsyncOperation:
        with self._write(conn) as c:
            c.execute(
                insert(schema.async_operations).values(
                    id=op.id,
                    conversation_id=op.conversation_id,
                    turn_id=op.turn_id,
                    status=op.status.value,
                    data=op.model_dump_json(),
                )
            )
        return op

    def save(self, op: AsyncOperation, conn: Connection | None = None) -> AsyncOperation:
        t = schema.async_operations
        with self._write(conn) as c:
            c.execute(
                update(t)
                .where(t.c.id == op.id)
                .values(status=op.status.value, data=op.model_dump_json())
            )
        return op

    def get(self, op_id: str, conn: Connection | None = None) -> AsyncOperation:
        t = schema.async_operations
        with self._read(conn) as c:
            found = c.execute(select(t.c.data).where(t.c.id == op_id)).scalar_one_or_none()
        if found is None:
            raise NotFound(f"async operation {op_id} not found")
        return AsyncOperation.model_validate_json(found)

    def list(
        self,
        conversation_id: str,
        *,
        turn_id: str | None = None,
        statuses: tuple[OperationStatus, ...] | None = None,
        conn: Connection | None = None,
    ) -> list[AsyncOperation]:
        t = schema.async_operations
        query = select(t.c.data).where(t.c.conversation_id == conversation_id)
        if turn_id is not None:
            query = query.where(t.c.turn_id == turn_id)
        if statuses is not None:
            query = query.where(t.c.status.in_([s.value for s in statuses]))
        with self._read(conn) as c:
            return [
                AsyncOperation.model_validate_json(r)
                for r in c.execute(query.order_by(t.c.id)).scalars()
            ]


class SessionOps(StoreOps):
    """Stable labels pointing at conversations (sessions, sub-agent sessions)."""

    def get(self, client_id: str, label: str, conn: Connection | None = None) -> str | None:
        t = schema.sessions
        with self._read(conn) as c:
            return c.execute(
                select(t.c.conversation_id).where(t.c.client_id == client_id, t.c.label == label)
            ).scalar_one_or_none()

    def put(
        self,
        client_id: str,
        label: str,
        conversation_id: str,
        created_at: datetime,
        conn: Connection | None = None,
    ) -> None:
        t = schema.sessions
        with self._write(conn) as c:
            c.execute(delete(t).where(t.c.client_id == client_id, t.c.label == label))
            c.execute(
                insert(t).values(
                    client_id=client_id,
                    label=label,
                    conversation_id=conversation_id,
                    created_at=_ts(created_at),
                )
            )


class Store:
    """All operations over one database: ``store.turns``, ``store.messages``, ..."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.clients = ClientOps(db)
        self.personas: LibraryOps[Persona] = LibraryOps(db, "persona", Persona)
        self.model_profiles: LibraryOps[ModelProfile] = LibraryOps(
            db, "model_profile", ModelProfile
        )
        self.tools: LibraryOps[Tool] = LibraryOps(db, "tool", Tool)
        self.tasks: LibraryOps[TaskDef] = LibraryOps(db, "task", TaskDef)
        self.workflows: LibraryOps[WorkflowDef] = LibraryOps(db, "workflow", WorkflowDef)
        self.library_versions = LibraryVersions(db)
        self.agents = AgentOps(db)
        self.conversations = ConversationOps(db)
        self.turns = TurnOps(db)
        self.messages = MessageOps(db)
        self.moves = MoveOps(db)
        self.events = EventOps(db)
        self.context = ContextOps(db)
        self.async_operations = AsyncOperationOps(db)
        self.sessions = SessionOps(db)
        self.forks = ForkOps(db)
        self.secrets = SecretOps(db)
        self.client_secrets = ClientSecretOps(db)
        self.session_labels = SessionLabelOps(db)
        self.hooks = HookOps(db)
        self.triggers = TriggerOps(db)
        self.memory_upkeep = MemoryUpkeepOps(db)
        self.message_embeddings = MessageEmbeddingOps(db)
        self.message_routes = MessageRouteOps(db)
        self.turn_models = TurnModelOps(db)
        self.pending_extractions = PendingExtractionOps(db)
        self.workflow_runs = WorkflowRunOps(db)
        self.projects = ProjectOps(db)
        self.workspaces = WorkspaceOps(db)
        self.quotas = QuotaOps(db)
        self.admin_keys = AdminKeyOps(db)
        self.audit = AuditOps(db)
        self.keys = KeyOps(db)
        self.members = MemberOps(db)
        self.writers = WriterLeaseOps(db)
        self.stream_tickets = StreamTicketOps(db)
        self.mcp_servers = McpServerOps(db)
        self.records = RecordOps(db)

    @classmethod
    def open(cls, url: str, pool: PoolLimits | None = None) -> Store:
        return cls(Database(url, pool))

    def conversation_tree(self, conversation_id: str) -> list[str]:
        """A conversation's id and the ids of every child conversation it started, recursively."""
        found: list[str] = []
        frontier = [conversation_id]
        with self.db.connect() as c:
            while frontier:
                current = frontier.pop()
                found.append(current)
                frontier.extend(
                    c.execute(
                        select(schema.conversations.c.id).where(
                            schema.conversations.c.started_by_conversation_id == current
                        )
                    ).scalars()
                )
        return found

    def delete_conversation_tree(self, conversation_id: str) -> list[str]:
        """Delete a conversation and every child conversation it started; returns deleted ids."""
        doomed: list[str] = []
        frontier = [conversation_id]
        with self.db.begin() as c:
            while frontier:
                current = frontier.pop()
                doomed.append(current)
                children = c.execute(
                    select(schema.conversations.c.id).where(
                        schema.conversations.c.started_by_conversation_id == current
                    )
                ).scalars()
                frontier.extend(children)
            turn_ids = select(schema.turns.c.id).where(schema.turns.c.conversation_id.in_(doomed))
            c.execute(delete(schema.moves).where(schema.moves.c.turn_id.in_(turn_ids)))
            c.execute(delete(schema.turn_traces).where(schema.turn_traces.c.turn_id.in_(turn_ids)))
            for table in (
                schema.messages,
                schema.turns,
                schema.events,
                schema.context_entries,
                schema.async_operations,
                schema.pending_extractions,
                schema.conversation_members,
                schema.forks,
                schema.sessions,
                schema.conversation_writers,
                schema.model_calls,
                schema.spans,
                schema.turn_links,
                schema.message_embeddings,
                schema.message_routes,
            ):
                c.execute(delete(table).where(table.c.conversation_id.in_(doomed)))
            c.execute(delete(schema.conversations).where(schema.conversations.c.id.in_(doomed)))
        return doomed
