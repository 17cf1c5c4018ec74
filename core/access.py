"""Users and their access to a client's conversations (issue 13, seed 003's memberships). Pure.

Inside a client, the app names the acting user on each request (docs/api.md, "Access"). A
conversation's **members** are users with a **level**: ``reader`` < ``writer`` < ``manager`` <
``owner``. Readers read (the conversation, its messages, turns, events, stream); writers also
post messages and cancel turns; managers also share (grant and revoke levels below owner) and
steer the conversation (policy, participants, completion, merge); owners also delete it and
transfer ownership (grant owner). A request without a user acts as the client itself, which may
do everything (the behaviour before users existed).

``allows(level, action)`` is the whole rule, tested as a table (level by action).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum

from core.errors import NotFound, PermissionDenied


class Level(IntEnum):
    """A member's access level; higher levels include everything below."""

    READER = 1
    WRITER = 2
    MANAGER = 3
    OWNER = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls[text.upper()]
        except KeyError:
            raise ValueError(
                f"unknown level {text!r}: one of reader, writer, manager, owner"
            ) from None


class Action(StrEnum):
    READ = "read"  # the conversation, messages, turns, events, members, the stream
    WRITE = "write"  # post a message, cancel a turn
    MANAGE = "manage"  # policy, participants, complete, merge; grant/revoke below owner
    DELETE = "delete"  # delete the conversation
    TRANSFER = "transfer"  # grant or revoke owner


REQUIRED: dict[Action, Level] = {
    Action.READ: Level.READER,
    Action.WRITE: Level.WRITER,
    Action.MANAGE: Level.MANAGER,
    Action.DELETE: Level.OWNER,
    Action.TRANSFER: Level.OWNER,
}


def allows(level: Level | None, action: Action) -> bool:
    """Whether a member at ``level`` (None: not a member) may do ``action``."""
    return level is not None and level >= REQUIRED[action]


def action_for_grant(current: Level | None, wanted: Level | None) -> Action:
    """What changing a member from ``current`` to ``wanted`` (None: removed) needs: a manager
    shares below owner; only an owner makes or unmakes owners."""
    if Level.OWNER in (current, wanted):
        return Action.TRANSFER
    return Action.MANAGE


def check(level: Level, action: Action, user: str, conversation_id: str) -> None:
    """``PermissionDenied`` naming the level ``action`` needs unless ``level`` allows it."""
    if not allows(level, action):
        raise PermissionDenied(
            f"user {user} is a {level.label} of conversation {conversation_id}: "
            f"{action.value} needs {REQUIRED[action].label}"
        )


def require(level: Level | None, action: Action, user: str, conversation_id: str) -> None:
    """``check``, and a user who is not a member gets ``NotFound``: to it the conversation is
    not there."""
    if level is None:
        raise NotFound(f"conversation {conversation_id} not found")
    check(level, action, user, conversation_id)
