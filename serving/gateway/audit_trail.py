"""Recording changes in the audit trail: who (client, key, user), what, when, from where.

A route that changes something security-relevant takes ``audit: Audit`` and calls
``audit.record(action, target, details)`` (in a thread: it writes the store), e.g.::

    await run_in_threadpool(audit.record, "hook.create", f"hook:{hook.id}", {"route": ...})

``Audit`` knows the request's API key (its public id), its client, the acting user
(``X-Wonder-User``) and the client's address (``core.client_address``: the TCP peer, or
``X-Forwarded-For`` only behind a proxy the operator trusts). ``record(context, client_id, ...)``
is the older entry point (no key, user or address unless ``who`` is given); new code uses
``Audit``. ``GET /v1/audit`` reads the trail (``serving.gateway.admin``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from core.client_address import client_address
from core.ids import new_id, utc_now
from core.store.audit import AuditEntry
from serving.gateway.auth import Context, RequestKey, User
from serving.gateway.context import GatewayContext

FORWARDED_FOR = "x-forwarded-for"


@dataclass(frozen=True)
class Who:
    """Who made a change, and from where."""

    client_id: str
    key_id: str | None = None
    user_id: str | None = None
    address: str | None = None


def address_of(connection: HTTPConnection, context: GatewayContext) -> str | None:
    """The client's address as the gateway sees it (a request's or a WebSocket's)."""
    peer = connection.client.host if connection.client else None
    forwarded = connection.headers.get(FORWARDED_FOR)
    return client_address(peer, forwarded, context.settings.trusted_networks)


def record(
    context: GatewayContext,
    actor_client_id: str,
    action: str,
    target: str,
    details: Mapping[str, object],
    subject_client_id: str | None = None,
    *,
    who: Who | None = None,
) -> AuditEntry:
    """Append one change to the audit trail, made by ``actor_client_id``'s key (``who``: the
    key, user and address, when the caller knows them)."""
    entry = AuditEntry(
        id=new_id("audit"),
        at=utc_now(),
        actor=f"client:{actor_client_id}",
        client_id=actor_client_id,
        key_id=who.key_id if who else None,
        user_id=who.user_id if who else None,
        address=who.address if who else None,
        action=action,
        target=target,
        subject_client_id=subject_client_id,
        details=dict(details),
    )
    return context.store.audit.record(entry)


@dataclass(frozen=True)
class Auditor:
    """The audit trail as one request writes it: every entry names the request's key, user and
    address."""

    context: GatewayContext
    who: Who

    def record(
        self,
        action: str,
        target: str,
        details: Mapping[str, object] | None = None,
        subject_client_id: str | None = None,
    ) -> AuditEntry:
        return record(
            self.context,
            self.who.client_id,
            action,
            target,
            details or {},
            subject_client_id,
            who=self.who,
        )


def request_auditor(request: Request, context: Context, key: RequestKey, user: User) -> Auditor:
    """FastAPI dependency: an ``Auditor`` for this request (its key authenticated)."""
    who = Who(key.client_id, key.id, user, address_of(request, context))
    return Auditor(context, who)


Audit = Annotated[Auditor, Depends(request_auditor)]
