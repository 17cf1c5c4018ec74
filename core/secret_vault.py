"""The rules of client secrets over the store: write (a new version each time), list, delete,
and resolve a reference to its value where it is used (``core.client_secrets`` has the shapes
and the sealing).

``resolve`` is the only way to a value, called by the process that sends it (a model call, an
``http.request``, a ``shell.exec`` environment), right before it does. A value is never logged,
never put in an error message, never returned by the API. Failures to resolve (no such secret,
no key, a value that does not open) are recorded in the audit trail (``secret.use_failed``)
and raised with the secret's name only. All methods block: call them off an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from core.client_secrets import (
    NO_KEY,
    SecretBox,
    SecretMeta,
    SecretsUnavailable,
    load_box,
)
from core.errors import Conflict, NotFound, WonderError
from core.ids import new_id, utc_now
from core.settings import Settings
from core.store import Store
from core.store.audit import AuditEntry

logger = logging.getLogger("wonder.secrets")

WRITE_ATTEMPTS = 3


class SecretVault:
    """Client secrets of one store, sealed with the operator's key from ``settings``."""

    def __init__(
        self, store: Store, settings: Settings, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._box: SecretBox | None = None

    def box(self) -> SecretBox:
        """The operator's key (read once it exists; ``SecretsUnavailable`` while it does not)."""
        if self._box is None:
            self._box = load_box(self.settings)
        if self._box is None:
            raise SecretsUnavailable(NO_KEY)
        return self._box

    # ------------------------------------------------------------------ writes

    def put(self, client_id: str, name: str, value: str, actor: str) -> SecretMeta:
        """Store ``value`` as ``name``: version 1, or the next version (a rotation)."""
        box = self.box()
        ops = self.store.client_secrets
        for _ in range(WRITE_ATTEMPTS):
            now = self.clock()
            try:
                before: SecretMeta | None = ops.meta(client_id, name)
            except NotFound:
                before = None
            if before is None:
                meta = SecretMeta(
                    name=name, version=1, created_at=now, created_by=actor, size=len(value.encode())
                )
                if ops.insert(client_id, meta, box.key_id, box.seal(value, client_id, name, 1)):
                    return meta
                continue
            version = before.version + 1
            meta = before.model_copy(
                update={
                    "version": version,
                    "rotated_at": now,
                    "rotated_by": actor,
                    "size": len(value.encode()),
                }
            )
            sealed = box.seal(value, client_id, name, version)
            if ops.replace(client_id, meta, box.key_id, sealed, previous=before.version):
                return meta
        raise Conflict(f"secret {name} is being written by someone else; try again")

    def delete(self, client_id: str, name: str) -> SecretMeta:
        meta = self.store.client_secrets.meta(client_id, name)
        if not self.store.client_secrets.delete(client_id, name):
            raise NotFound(f"secret {name} not found")
        return meta

    # ------------------------------------------------------------------ reads

    def list(self, client_id: str, after: str | None = None, limit: int = 100) -> list[SecretMeta]:
        return self.store.client_secrets.list(client_id, after=after, limit=limit)

    def meta(self, client_id: str, name: str) -> SecretMeta:
        return self.store.client_secrets.meta(client_id, name)

    def resolve(self, client_id: str | None, name: str, where: str) -> str:
        """The value of ``client_id``'s secret ``name``, for ``where`` (``"model profile p"``,
        ``"http.request header Authorization"``): the audit trail names it when this fails."""
        if client_id is None:
            raise NotFound(f"secret {name} not found: nothing here belongs to a client")
        try:
            stored = self.store.client_secrets.sealed(client_id, name)
            return self.box().open(stored.sealed, client_id, name, stored.meta.version)
        except WonderError as exc:
            self._record_failure(client_id, name, where, exc)
            raise

    def _record_failure(self, client_id: str, name: str, where: str, error: WonderError) -> None:
        logger.warning(
            "secret %s of client %s could not be used for %s: %s",
            name,
            client_id,
            where,
            error.code,
        )
        self.store.audit.record(
            AuditEntry(
                id=new_id("audit"),
                at=self.clock(),
                actor=f"client:{client_id}",
                client_id=client_id,
                action="secret.use_failed",
                target=f"secrets:{name}",
                details={"where": where, "code": str(error.code), "reason": error.message},
            )
        )
