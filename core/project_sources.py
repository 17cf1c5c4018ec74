"""Where a client's projects may come from: the operator's policy (pure, but for resolving paths).

A project names a local repository by path, or a remote one Wonder clones. The operator says, per
client (``WONDER_PROJECT_CLIENT_SOURCES``, else ``WONDER_PROJECT_PATH_ROOTS``,
``WONDER_PROJECT_URL_SCHEMES``, ``WONDER_PROJECT_URL_HOSTS`` for every client):

- **local paths** (and ``file://`` URLs): only under ``path_roots``, after every symlink is
  resolved, and never inside Wonder's data or workspaces directories; no roots, no local paths;
- **URLs**: only over ``url_schemes`` (default ``https``) and to ``url_hosts`` (``name``,
  ``*.domain``, ``*`` for any public host, each optionally ``:port``); no hosts, no remotes. A
  host allowed only by ``*`` must resolve to public addresses
  (``core.shell_egress.address_refusal``); a host the operator names is taken as named. Passwords
  in URLs are refused (they would be stored and shown with the project);
- **credentials** (a secret of the client, ``core.project_credentials``): only to
  ``credential_hosts`` (same patterns; ``*`` for any host the client may clone from), only over
  https, or over http to a loopback address the operator names; none by default.

Refusals name the rule and the client's own words, never a path of the host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from core.errors import InvalidInput, PermissionDenied
from core.settings import ProjectSources, Settings
from core.shell_egress import address_refusal, ip_literal, matches, normalise_host

DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


@dataclass(frozen=True, slots=True)
class RemoteSource:
    """A repository URL, understood: ``path`` is the local path of a ``file://`` URL."""

    url: str
    scheme: str
    host: str
    port: int | None
    path: str


def sources_for(settings: Settings, client_id: str) -> ProjectSources:
    """The repository sources the operator allows ``client_id``."""
    chosen = settings.project_client_sources.get(client_id)
    if chosen is not None:
        return chosen
    return ProjectSources(
        path_roots=list(settings.project_path_roots),
        url_schemes=list(settings.project_url_schemes),
        url_hosts=list(settings.project_url_hosts),
        credential_hosts=list(settings.project_credential_hosts),
    )


def _scp_like(location: str) -> RemoteSource | None:
    head, sep, path = location.partition(":")
    if not sep or "/" in head or "@" not in head:
        return None
    user, _, host = head.rpartition("@")
    if not user or not host or host.startswith("-"):
        raise InvalidInput(f"repository: {location!r} is not a repository address")
    return RemoteSource(url=location, scheme="ssh", host=host.lower(), port=None, path=path)


def parse_remote(location: str) -> RemoteSource:
    """A remote repository location (``scheme://...`` or scp-like ``user@host:path``)."""
    scp = _scp_like(location) if "://" not in location else None
    if scp is not None:
        return scp
    parts = urlsplit(location)
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput(f"repository: {location!r} has an invalid port") from None
    if parts.password is not None:
        raise InvalidInput("repository: a URL may not carry a password (it would be stored)")
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme == "file":
        if host not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidInput("repository: a file:// URL names an absolute local path")
        return RemoteSource(url=location, scheme=scheme, host="", port=None, path=parts.path)
    if not host or host.startswith("-"):
        raise InvalidInput(f"repository: {location!r} names no host")
    return RemoteSource(url=location, scheme=scheme, host=host, port=port, path=parts.path)


def check_remote(sources: ProjectSources, source: RemoteSource) -> None:
    """Refuse a URL the operator's policy does not allow (a ``file://`` path is checked by
    ``check_local``)."""
    if source.scheme not in sources.url_schemes:
        allowed = ", ".join(sources.url_schemes) or "none"
        raise PermissionDenied(
            f"repository: {source.scheme}:// is not allowed for this client (allowed: {allowed})"
        )
    if source.scheme == "file":
        return
    port = source.port or DEFAULT_PORTS.get(source.scheme, 0)
    if not matches(sources.url_hosts, source.host, port, None):
        raise PermissionDenied(f"repository: host {source.host} is not allowed for this client")


def credentials_refusal(sources: ProjectSources, source: RemoteSource) -> str | None:
    """Why the client's credentials may not be sent to ``source`` (None: they may)."""
    if source.scheme not in ("https", "http"):
        return f"credentials are sent only over https, not {source.scheme}"
    port = source.port or DEFAULT_PORTS[source.scheme]
    if source.scheme == "http":
        named = [h for h in sources.credential_hosts if h.strip() not in ("*", "any")]
        if not (_loopback(source.host) and matches(named, source.host, port, None)):
            return (
                "credentials are sent only over https (over http, only to a loopback address "
                "the operator names)"
            )
        return None
    if not matches(sources.credential_hosts, source.host, port, None):
        return f"this client may not send credentials to {source.host}"
    return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(normalise_host(host)).is_loopback
    except ValueError:
        return False


def needs_public_address(sources: ProjectSources, source: RemoteSource) -> bool:
    """Whether the host is allowed only by ``*`` (so it must resolve to public addresses)."""
    named = [h for h in sources.url_hosts if h.strip() not in ("*", "any")]
    port = source.port or 0
    return source.scheme != "file" and not matches(named, source.host, port, None)


def address_problem(host: str, addresses: list[str]) -> str | None:
    """Why a host allowed only by ``*`` may not be cloned from (its addresses), or None."""
    for address in addresses if not ip_literal(host) else [host]:
        refusal = address_refusal(address, [])
        if refusal is not None:
            return f"host {host} is not public ({refusal.split('(')[-1].rstrip(')')})"
    return None


def check_local(sources: ProjectSources, given: str, resolved: Path, forbidden: list[Path]) -> None:
    """Refuse a local repository path: ``given`` as the client wrote it, ``resolved`` with every
    symlink followed (the path Wonder would use), ``forbidden`` Wonder's own directories."""
    for wonders in forbidden:
        if resolved == wonders or wonders in resolved.parents or resolved in wonders.parents:
            raise PermissionDenied(
                "repository: paths inside (or above) Wonder's data directory are not allowed"
            )
    roots = [Path(root).resolve() for root in sources.path_roots]
    if not roots:
        raise PermissionDenied("repository: local repositories are not allowed for this client")
    if not any(resolved == root or root in resolved.parents for root in roots):
        raise PermissionDenied(f"repository: {given} is outside the allowed project roots")
