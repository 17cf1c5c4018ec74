"""API keys (issue 13): what a key is, its scope and whether it still opens the door.

A key belongs to one client. Its **scope** says what it may do: ``admin`` keys manage the client's
keys and its library; ``app`` keys do everything else (agents, conversations, messages, memories).
A client's first key (``wonder keys create``) is an admin key; keys stored before scopes existed
count as admin keys (they could do everything). A key stops working when it is **revoked** or
when its **expiry** passes; the secret itself is never stored, only its SHA-256.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class KeyScope(StrEnum):
    ADMIN = "admin"
    APP = "app"


class KeyStatus(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


KEY_ID_HEX = 24


def hash_key(secret: str) -> str:
    """The stored form of a key: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def key_id_for_hash(key_hash: str) -> str:
    """A key's public id: ``key_`` and the first 96 bits of its hash (never the secret)."""
    return f"key_{key_hash[:KEY_ID_HEX]}"


class ApiKey(BaseModel):
    """A key as stored (without its secret)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="The key's public id (`key_…`), used to list, revoke and rotate")
    client_id: str
    name: str | None = Field(None, description="What the key is for")
    scope: KeyScope = Field(description="admin: manages keys and the library; app: the rest")
    created_at: datetime
    expires_at: datetime | None = Field(None, description="After this the key is refused")
    revoked_at: datetime | None = Field(None, description="When it was revoked")

    def status(self, now: datetime) -> KeyStatus:
        """Whether the key opens the door at ``now``."""
        if self.revoked_at is not None:
            return KeyStatus.REVOKED
        if self.expires_at is not None and self.expires_at <= now:
            return KeyStatus.EXPIRED
        return KeyStatus.ACTIVE

    def refusal(self, now: datetime) -> str | None:
        """Why the key is refused at ``now`` (None: it is active)."""
        match self.status(now):
            case KeyStatus.REVOKED:
                return f"API key {self.id} was revoked"
            case KeyStatus.EXPIRED:
                return f"API key {self.id} expired at {self.expires_at:%Y-%m-%dT%H:%M:%SZ}"
            case KeyStatus.ACTIVE:
                return None
