"""A client's secrets over the API: write-only values referenced by name (docs/api.md "Secrets").

``PUT /v1/secrets/{name}`` (admin-scope key) stores a value: version 1, or the next version (a
rotation); ``GET /v1/secrets`` and ``GET /v1/secrets/{name}`` show names and metadata (version,
created and rotated at and by whom, size), never a value; ``DELETE /v1/secrets/{name}``
(admin-scope key) removes one. Every write, rotation and deletion is in the audit trail
(``secret.create``, ``secret.rotate``, ``secret.delete``); so is every failure to use one
(``secret.use_failed``, recorded by the process that tried). Another client's secret is a 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from core.client_secrets import SecretMeta, SecretValue
from core.domain import SECRET_NAME_PATTERN
from core.secret_vault import SecretVault
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, KeyAdmin
from serving.gateway.context import GatewayContext
from serving.gateway.protocol import Page

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])

SecretPath = Annotated[str, Path(pattern=SECRET_NAME_PATTERN, description="The secret's name")]
MAX_PAGE = 500


def vault(context: GatewayContext) -> SecretVault:
    return SecretVault(context.store, context.settings)


@router.put(
    "/{name}",
    response_model=SecretMeta,
    summary="Store a secret's value, or rotate it (a new version); the value is never returned",
)
def put_secret(
    name: SecretPath, body: SecretValue, context: Context, key: KeyAdmin, audit: Audit
) -> SecretMeta:
    client_id = key.client_id
    meta = vault(context).put(client_id, name, body.value, f"client:{client_id}")
    action = "secret.create" if meta.version == 1 else "secret.rotate"
    audit.record(action, f"secrets:{name}", {"name": name, "version": meta.version})
    return meta


@router.get("", response_model=Page[SecretMeta], summary="Your secrets' names and metadata")
def list_secrets(
    context: Context,
    client_id: ClientId,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    after_cursor: Annotated[
        str | None, Query(pattern=SECRET_NAME_PATTERN, description="The last name of a page")
    ] = None,
) -> Page[SecretMeta]:
    items = vault(context).list(client_id, after=after_cursor, limit=limit)
    next_cursor = items[-1].name if len(items) == limit else None
    return Page[SecretMeta](items=items, next_cursor=next_cursor)


@router.get("/{name}", response_model=SecretMeta, summary="One secret's metadata (no value)")
def get_secret(name: SecretPath, context: Context, client_id: ClientId) -> SecretMeta:
    return vault(context).meta(client_id, name)


@router.delete("/{name}", status_code=204, summary="Delete a secret (admin-scope key)")
def delete_secret(name: SecretPath, context: Context, key: KeyAdmin, audit: Audit) -> Response:
    meta = vault(context).delete(key.client_id, name)
    audit.record("secret.delete", f"secrets:{name}", {"name": name, "version": meta.version})
    return Response(status_code=204)
