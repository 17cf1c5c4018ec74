"""The key that signs page cursors: ``WONDER_CURSOR_SECRET`` when set, else a secret the store
makes once, so every gateway replica (and a restarted one) accepts the cursors another issued."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from core.store import Store
from serving.gateway.context import GatewayContext


def cursor_key(context: GatewayContext) -> bytes:
    secret = context.settings.cursor_secret
    if secret is not None:
        return hashlib.sha256(secret.get_secret_value().encode()).digest()
    return _store_key(context.store)


@lru_cache(maxsize=8)
def _store_key(store: Store) -> bytes:
    return store.secrets.get_or_create("page-cursor")
