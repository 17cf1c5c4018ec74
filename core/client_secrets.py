"""Client secrets: named, write-only values a client stores and references by name.

A client writes a value once (``PUT /v1/secrets/{name}``); nothing ever returns it. Model
profiles (``api_key_secret``), ``http.request`` headers and ``shell.exec`` environments name a
secret (``{"secret": "name"}``) and the process that uses it resolves the value at the last moment
(``core.secret_vault``). Values are sealed with the operator's key: AES-256-GCM, a fresh 96-bit
nonce per write, and the client, name and version as associated data (a sealed value copied onto
another row or version does not open).

The operator's key is ``WONDER_SECRETS_KEY`` (32 bytes, URL-safe base64) or, when that is unset,
the key file ``WONDER_SECRETS_KEY_FILE`` (default ``<data_dir>/secrets.key``, mode 0600), which
``ensure_key_file`` makes for the embedded deployment. Without either, writing a secret is refused
with an error saying how to set one, and a reference cannot be resolved.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, ConfigDict, Field

from core.domain import SECRET_NAME_PATTERN
from core.errors import ErrorCode, NonRetryableError
from core.settings import Settings

SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN, description="A secret's name")]
MAX_SECRET_BYTES = 16 * 1024
KEY_BYTES = 32
NONCE_BYTES = 12
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
SECRET_REF_KEYS = frozenset({"secret", "api_key_secret"})
"""The keys that name a secret wherever a client writes a reference."""


class SecretsUnavailable(NonRetryableError):
    """The operator has not configured a secrets key on this deployment."""

    code = ErrorCode.UNAVAILABLE


class SecretUnreadable(NonRetryableError):
    """A stored secret does not open with this deployment's key (another key, or tampered)."""

    code = ErrorCode.EXECUTION_FAILED


NO_KEY = (
    "secrets are not available on this deployment: the operator sets WONDER_SECRETS_KEY "
    "(32 bytes, URL-safe base64) or a key file (WONDER_SECRETS_KEY_FILE, default "
    "<data_dir>/secrets.key; `wonder up` makes one)"
)


class SecretRef(BaseModel):
    """A reference to a secret where a value is expected: ``{"secret": "name"}``, with an
    optional ``prefix`` put before the value (``"Bearer "`` for an Authorization header)."""

    model_config = ConfigDict(extra="forbid")

    secret: SecretName
    prefix: str = Field("", max_length=64, pattern=r"^[ -~]*$")


class SecretMeta(BaseModel):
    """What anyone may read of a secret: never its value."""

    model_config = ConfigDict(extra="forbid")

    name: SecretName
    version: int = Field(description="1 when created; each rotation (a PUT) adds one")
    created_at: datetime
    created_by: str = Field(description="Who wrote the first version ('client:<id>', ...)")
    rotated_at: datetime | None = Field(None, description="When the current version was written")
    rotated_by: str | None = Field(None, description="Who wrote the current version")
    size: int = Field(description="The value's length in bytes")


class SecretValue(BaseModel):
    """A ``PUT /v1/secrets/{name}`` body."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=MAX_SECRET_BYTES)


# --------------------------------------------------------------------------- sealing


@dataclass(frozen=True)
class SecretBox:
    """Seals and opens secret values with one operator key (AES-256-GCM)."""

    key: bytes

    @property
    def key_id(self) -> str:
        """A short public fingerprint of the key (which key sealed a row)."""
        return hashlib.sha256(b"wonder-secrets:" + self.key).hexdigest()[:16]

    def seal(self, value: str, client_id: str, name: str, version: int) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = AESGCM(self.key).encrypt(nonce, value.encode(), _aad(client_id, name, version))
        return base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, sealed: str, client_id: str, name: str, version: int) -> str:
        raw = base64.urlsafe_b64decode(sealed.encode())
        try:
            plain = AESGCM(self.key).decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(client_id, name, version)
            )
        except InvalidTag:
            raise SecretUnreadable(f"secret {name!r} does not open with this key") from None
        return plain.decode()


def _aad(client_id: str, name: str, version: int) -> bytes:
    return f"{client_id}\x00{name}\x00{version}".encode()


def parse_key(text: str) -> bytes:
    """A key from its URL-safe base64 text; ``ValueError`` unless it is 32 bytes."""
    try:
        key = base64.urlsafe_b64decode(text.strip().encode())
    except (ValueError, TypeError):
        raise ValueError("the secrets key is not URL-safe base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"the secrets key must be {KEY_BYTES} bytes, not {len(key)}")
    return key


def new_key_text() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def key_file_path(settings: Settings) -> Path:
    return settings.secrets_key_file or settings.data_dir / "secrets.key"


def load_box(settings: Settings) -> SecretBox | None:
    """The operator's key (``WONDER_SECRETS_KEY``, else the key file), or None when neither is
    set. A key that is set but malformed is ``SecretsUnavailable`` (never a silent fallback)."""
    text: str | None = None
    if settings.secrets_key is not None:
        text = settings.secrets_key.get_secret_value()
    else:
        path = key_file_path(settings)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SecretsUnavailable(
                f"the secrets key file cannot be read: {exc.strerror}"
            ) from None
    try:
        return SecretBox(parse_key(text))
    except ValueError as exc:
        raise SecretsUnavailable(str(exc)) from None


def ensure_key_file(path: Path) -> Path:
    """Make the key file ``path`` (mode 0600, a new random key) unless it exists; returns it.

    For the embedded deployment: ``wonder up`` calls it for ``<data_dir>/secrets.key``. The file
    is created exclusively (``O_EXCL``), so two processes racing never overwrite each other's key.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as out:
        out.write(new_key_text() + "\n")
    return path


# --------------------------------------------------------------------------- references


def names_a_secret(value: Any) -> bool:
    """Whether ``value`` holds a secret reference anywhere (a key of ``SECRET_REF_KEYS``).

    Values filled into a task's parameters from its input (what a model or a caller sends) must
    never name a secret: only the stored task definition may."""
    if isinstance(value, dict):
        return any(k in SECRET_REF_KEYS or names_a_secret(v) for k, v in value.items())
    if isinstance(value, list):
        return any(names_a_secret(v) for v in value)
    return False
