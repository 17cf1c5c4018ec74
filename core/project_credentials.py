"""A cloned project's credentials: a secret of its own client, sent to its origin as an HTTP
``Authorization`` header on each clone and push (never the host's: ``core.git`` runs git with no
credential helper, ssh agent or keys, and an empty ``HOME``).

The project stores the secret's name (``core.domain.ProjectCredentials``). ``origin_access``
reads the value through the vault right before git runs (a rotated secret is used by the next
clone or push), once the operator's policy allows the client's credentials to the origin's host
(``core.project_sources.credentials_refusal``: https, or http to a loopback address the operator
names), and hands it to git in its environment (``RemoteAccess``): never an argument vector, the
URL, or a file git writes. Git follows no redirect (``http.followRedirects`` is pinned ``false``),
so the header never reaches another host. What git says when it fails can repeat the header (a
server may echo what it was sent): ``OriginAccess.scrubbed`` removes the value, in every form it
was sent in, before the message goes anywhere.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from core.domain import BasicCredentials, Project, ProjectCredentials
from core.errors import Conflict, InvalidInput, NotFound, PermissionDenied, WonderError
from core.git import RemoteAccess
from core.project_sources import RemoteSource, credentials_refusal
from core.secret_vault import SecretVault
from core.settings import ProjectSources, Settings
from core.store import Store

HIDDEN = "[secret]"
TOKEN = re.compile(r"^[!-~]+$")
"""What a bearer token may hold: visible ASCII (a header value; no space, no line break)."""
AUTH_FAILURES = (
    "could not read Username",
    "could not read Password",
    "Authentication failed",
    "returned error: 401",
    "returned error: 403",
)
"""What git says when the origin wants credentials it did not get, or refused the ones sent."""


def check_credentials(
    store: Store,
    client_id: str,
    sources: ProjectSources,
    source: RemoteSource,
    credentials: ProjectCredentials,
) -> None:
    """Refuse credentials the operator's policy does not let the client send to ``source``, or
    naming a secret the client does not have (a name, never a value, is read)."""
    refusal = credentials_refusal(sources, source)
    if refusal is not None:
        raise PermissionDenied(f"credentials: {refusal}")
    try:
        store.client_secrets.meta(client_id, credentials.secret)
    except NotFound:
        raise NotFound(f"credentials: secret {credentials.secret} not found") from None


def authorization(credentials: ProjectCredentials, value: str) -> str:
    """The ``Authorization`` header value for ``credentials`` whose secret holds ``value``."""
    if isinstance(credentials, BasicCredentials):
        pair = f"{credentials.username}:{value}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"
    if not TOKEN.fullmatch(value):
        raise InvalidInput(
            f"credentials: secret {credentials.secret} holds characters a bearer token cannot "
            "(only visible ASCII: no spaces or line breaks)"
        )
    return f"Bearer {value}"


def hidden_forms(credentials: ProjectCredentials, value: str, header: str) -> tuple[str, ...]:
    """Every spelling of the secret a server could repeat back, longest first."""
    forms = {value, header, header.split(" ", 1)[1], quote(value, safe="")}
    if isinstance(credentials, BasicCredentials):
        forms.add(f"{credentials.username}:{value}")
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


@dataclass(frozen=True, slots=True)
class OriginAccess:
    """How one clone or push reaches a project's origin, and how its failures read."""

    access: RemoteAccess
    secret: str | None = None
    hidden: tuple[str, ...] = field(default=(), repr=False)

    def failure(self, message: str) -> str:
        """``message`` (git's, after a clone or push failed) with the secret removed, and an
        authentication failure said plainly."""
        for form in self.hidden:
            message = message.replace(form, HIDDEN)
        if not any(marker in message for marker in AUTH_FAILURES):
            return message
        if self.secret is None:
            return (
                "the origin asks for credentials: give the project credentials (one of your "
                f"secrets, where the operator allows them) ({message})"
            )
        return (
            f"the origin refused the credentials of secret {self.secret}: rotate the secret or "
            f"change the project's credentials ({message})"
        )

    def scrubbed(self, error: WonderError) -> WonderError:
        """``error``, its message through ``failure`` (the same error when nothing changed)."""
        message = self.failure(error.message)
        if message == error.message:
            return error
        cleaned = WonderError(message, code=error.code)
        cleaned.retriable = error.retriable
        return cleaned


def origin_access(
    store: Store,
    settings: Settings,
    project: Project,
    sources: ProjectSources,
    source: RemoteSource,
) -> OriginAccess:
    """The access of one clone or push to ``project``'s origin ``source``: its transport, and its
    credentials' header with the secret's current value."""
    credentials = project.credentials
    protocols = (source.scheme,)
    if credentials is None:
        return OriginAccess(RemoteAccess(protocols=protocols))
    refusal = credentials_refusal(sources, source)  # the policy may have changed
    if refusal is not None:
        raise PermissionDenied(f"credentials: {refusal}")
    vault = SecretVault(store, settings)
    try:
        value = vault.resolve(project.client_id, credentials.secret, f"project {project.id}")
    except NotFound:
        raise Conflict(
            f"credentials: secret {credentials.secret} not found (store it again, or change the "
            "project's credentials)"
        ) from None
    header = authorization(credentials, value)
    return OriginAccess(
        RemoteAccess(protocols=protocols, http_authorization=header),
        secret=credentials.secret,
        hidden=hidden_forms(credentials, value, header),
    )
