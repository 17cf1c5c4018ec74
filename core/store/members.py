"""Storage of conversation members (``conversation_members``): grant, revoke, list, copy. No
rules here: ``core.access`` says who may change what."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Select, delete, insert, select, tuple_

from core.access import Level
from core.store import schema
from core.store.database import Database


class Member(BaseModel):
    """A user's access to one conversation."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str
    user_id: str
    level: str = Field(description="reader | writer | manager | owner")
    granted_at: datetime
    granted_by: str | None = Field(None, description="The user who granted it (None: the client)")


def conversations_of(user_id: str) -> Select[tuple[str]]:
    """The ids of the conversations ``user_id`` is a member of, as a subquery (listings filter
    with ``column.in_(conversations_of(user))``)."""
    t = schema.conversation_members
    return select(t.c.conversation_id).where(t.c.user_id == user_id)


def _member(row: object) -> Member:
    return Member.model_validate(row, from_attributes=True)


class MemberOps:
    def __init__(self, db: Database) -> None:
        self.db = db

    def level(
        self, conversation_id: str, user_id: str, conn: Connection | None = None
    ) -> Level | None:
        t = schema.conversation_members
        query = select(t.c.level).where(
            t.c.conversation_id == conversation_id, t.c.user_id == user_id
        )
        if conn is not None:
            found = conn.execute(query).scalar_one_or_none()
        else:
            with self.db.connect() as c:
                found = c.execute(query).scalar_one_or_none()
        return None if found is None else Level.parse(found)

    def present(self, pairs: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of the (conversation, user) ``pairs`` are members now (one query: a replica
        checks the members of all its open streams at once)."""
        wanted = list(dict.fromkeys(pairs))
        if not wanted:
            return set()
        t = schema.conversation_members
        query = select(t.c.conversation_id, t.c.user_id).where(
            tuple_(t.c.conversation_id, t.c.user_id).in_(wanted)
        )
        with self.db.connect() as c:
            return {(r.conversation_id, r.user_id) for r in c.execute(query).all()}

    def grant(
        self,
        conversation_id: str,
        user_id: str,
        level: Level,
        at: datetime,
        granted_by: str | None = None,
        conn: Connection | None = None,
    ) -> Member:
        """Give ``user_id`` ``level`` on the conversation (replacing any level it had)."""
        t = schema.conversation_members
        row = {
            "conversation_id": conversation_id,
            "user_id": user_id,
            "level": level.label,
            "granted_at": at.isoformat(),
            "granted_by": granted_by,
        }

        def write(c: Connection) -> None:
            c.execute(
                delete(t).where(t.c.conversation_id == conversation_id, t.c.user_id == user_id)
            )
            c.execute(insert(t).values(**row))

        if conn is not None:
            write(conn)
        else:
            with self.db.begin() as c:
                write(c)
        return Member(
            conversation_id=conversation_id,
            user_id=user_id,
            level=level.label,
            granted_at=at,
            granted_by=granted_by,
        )

    def revoke(self, conversation_id: str, user_id: str, conn: Connection | None = None) -> bool:
        t = schema.conversation_members
        statement = delete(t).where(t.c.conversation_id == conversation_id, t.c.user_id == user_id)
        if conn is not None:
            return bool(conn.execute(statement).rowcount)
        with self.db.begin() as c:
            return bool(c.execute(statement).rowcount)

    def list(self, conversation_id: str, conn: Connection | None = None) -> list[Member]:
        t = schema.conversation_members
        query = select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.user_id)
        if conn is not None:
            return [_member(r) for r in conn.execute(query).all()]
        with self.db.connect() as c:
            return [_member(r) for r in c.execute(query).all()]

    def copy(self, source_id: str, target_id: str, at: datetime, conn: Connection) -> int:
        """Give ``target_id`` the members of ``source_id`` (a child conversation's start)."""
        copied = self.list(source_id, conn)
        for member in copied:
            self.grant(
                target_id, member.user_id, Level.parse(member.level), at, member.granted_by, conn
            )
        return len(copied)
