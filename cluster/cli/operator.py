"""The operator's commands, which write the store the settings name directly (no gateway):
``wonder keys``, ``wonder quota`` and ``wonder library apply``. Each change is recorded in the
audit trail as ``cli:<OS user>``.

Two kinds of key: every client key has a scope (``admin``: manages its client's keys and
library; ``app``: the rest). An **operator key** (``wonder keys create --operator``) is a client
key the operator also trusts with every client's quota and the whole audit trail.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

import library
from cluster.cli.output import (
    ExitCode,
    fail,
    json_mode,
    print_json,
    progress_stream,
    table,
    warn,
)
from core.domain import Client
from core.errors import InvalidInput, NotFound
from core.ids import new_id, utc_now
from core.keys import ApiKey, key_id_for_hash
from core.library_files import apply_library
from core.quotas import Quota, UserQuota
from core.settings import Settings, load_settings
from core.store import Store
from core.store.audit import AuditEntry
from core.store.library import SYSTEM
from serving.gateway.auth import USER_PATTERN

QUOTA_FIELDS = (
    "requests_per_second",
    "burst",
    "concurrent_websockets",
    "concurrent_turns",
    "conversations",
    "memories",
    "tokens_per_day",
)
USER_QUOTA_FIELDS = ("requests_per_second", "burst", "concurrent_turns", "tokens_per_day")


def open_settings_store(settings: Settings) -> Store:
    return Store.open(settings.resolved_database_url)


def default_library_dir() -> Path:
    """The shipped library: the ``library`` package's folder."""
    return Path(library.__file__).resolve().parent


# --------------------------------------------------------------------------- audit


def cli_audit(
    store: Store, action: str, target: str, details: dict[str, Any], subject: str | None
) -> None:
    """Record a change made from this command line (actor ``cli:<OS user>``)."""
    store.audit.record(
        AuditEntry(
            id=new_id("audit"),
            at=utc_now(),
            actor=f"cli:{os_user()}",
            action=action,
            target=target,
            subject_client_id=subject,
            details=details,
        )
    )


def os_user() -> str:
    try:
        return str(getpass.getuser())
    except (KeyError, OSError):  # no USER variable and no passwd entry (some containers)
        return f"uid-{os.getuid()}"


# --------------------------------------------------------------------------- keys


def create_client_key(store: Store, name: str) -> tuple[str, str]:
    """A new client named ``name`` and a fresh API key for it: ``(client_id, key)``."""
    client_id, key, _ = create_client_and_key(store, name)
    return client_id, key


def create_client_and_key(store: Store, name: str) -> tuple[str, str, ApiKey]:
    """A new client named ``name`` and a fresh admin-scope key: ``(client_id, secret, key)``."""
    client = Client(id=new_id("client"), name=name, created_at=utc_now())
    store.clients.insert(client)
    secret = f"wk_{secrets.token_urlsafe(32)}"
    stored = store.keys.add(client.id, secret, utc_now(), name=name)  # a client's first key: admin
    return client.id, secret, stored


def cmd_keys_create(args: argparse.Namespace) -> int:
    if args.admin_alias:
        warn("--admin is deprecated: it means --operator (an operator key)")
    operator = bool(args.operator or args.admin_alias)
    store = open_settings_store(load_settings())
    client_id, secret, stored = create_client_and_key(store, args.name)
    if operator:
        store.admin_keys.add(secret, utc_now())
    details = {
        "key_id": stored.id,
        "client_id": client_id,
        "name": args.name,
        "scope": stored.scope.value,
        "operator": operator,
    }
    cli_audit(store, "key.create", f"key:{stored.id}", details, client_id)
    if json_mode():
        print_json({**details, "api_key": secret})
        return 0
    kind = "operator key" if operator else "admin scope"
    print(f"client: {client_id}\napi key: {secret}  ({stored.id}, {kind})")
    print("Keep the key secret: it is shown once. Send it as 'Authorization: Bearer <key>'.")
    return 0


def key_row(key: ApiKey, operator_ids: set[str]) -> dict[str, Any]:
    """A key as listed: its fields, its status now, and whether it is an operator key."""
    return {
        **key.model_dump(mode="json"),
        "status": key.status(utc_now()).value,
        "operator": key.id in operator_ids,
    }


def cmd_keys_list(args: argparse.Namespace) -> int:
    store = open_settings_store(load_settings())
    if args.client_id is not None:
        try:
            store.clients.get(args.client_id)
        except NotFound as exc:
            return fail(exc.message, ExitCode.NOT_FOUND)
    operators = {key_id_for_hash(h) for h in store.admin_keys.key_hashes()}
    rows = [key_row(k, operators) for k in store.keys.list(args.client_id)]
    if json_mode():
        print_json(rows)
        return 0
    table(
        ["KEY", "CLIENT", "SCOPE", "OPERATOR", "STATUS", "EXPIRES", "NAME"],
        [
            [
                r["id"],
                r["client_id"],
                r["scope"],
                "yes" if r["operator"] else "no",
                r["status"],
                (r["expires_at"] or "-")[:19],
                r["name"] or "",
            ]
            for r in rows
        ],
    )
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    store = open_settings_store(load_settings())
    try:
        key = store.keys.get(args.key_id)
    except NotFound as exc:
        return fail(exc.message, ExitCode.NOT_FOUND)
    if key.revoked_at is None:
        key = store.keys.revoke(key.id, utc_now())
        details = {"key_id": key.id, "name": key.name}
        cli_audit(store, "key.revoke", f"key:{key.id}", details, key.client_id)
    if json_mode():
        print_json(key.model_dump(mode="json"))
        return 0
    print(f"{key.id} revoked at {key.revoked_at:%Y-%m-%dT%H:%M:%SZ} (client {key.client_id})")
    return 0


# --------------------------------------------------------------------------- quotas


def cmd_quota_set(args: argparse.Namespace) -> int:
    """Set a client's quota (or, with ``--user``, one of its users'): the given fields change,
    ``--unlimited FIELD`` clears one."""
    store = open_settings_store(load_settings())
    try:
        store.clients.get(args.client_id)
    except NotFound as exc:
        return fail(exc.message, ExitCode.NOT_FOUND)
    named = [f for f in QUOTA_FIELDS if getattr(args, f) is not None] + (args.unlimited or [])
    user = args.user
    if user is not None:
        refused = user_refusal(user, [f for f in named if f not in USER_QUOTA_FIELDS])
        if refused:
            return fail(refused, ExitCode.USAGE)
    before = (
        store.quotas.get_user(args.client_id, user) or UserQuota()
        if user is not None
        else store.quotas.get(args.client_id) or Quota()
    )
    fields = before.model_dump(exclude_none=True)
    fields.update({f: getattr(args, f) for f in QUOTA_FIELDS if getattr(args, f) is not None})
    for name in args.unlimited or []:
        fields.pop(name, None)
    try:
        quota = type(before).model_validate(fields)
    except ValidationError as exc:
        return fail(f"invalid quota: {exc}", ExitCode.USAGE)
    details: dict[str, Any] = {"before": before.model_dump(exclude_none=True), "after": fields}
    if isinstance(quota, Quota):
        store.quotas.put(args.client_id, quota, utc_now())
        target = f"client:{args.client_id}"
    else:
        store.quotas.put_user(args.client_id, user, quota, utc_now())
        target, details = f"user:{user}", {"user_id": user, **details}
    cli_audit(store, "quota.set", target, details, args.client_id)
    print_json(quota.model_dump(exclude_none=True))
    return 0


def user_refusal(user: str, client_only: list[str]) -> str | None:
    """Why ``--user USER`` cannot be set as asked (a malformed id, a client-only field)."""
    if not re.match(USER_PATTERN, user):
        return f"--user: a user id of 1-200 letters, digits and _.:@+- (got {user!r})"
    if client_only:
        return (
            f"a user's quota has {', '.join(USER_QUOTA_FIELDS)}; "
            f"{', '.join(client_only)} are the client's only"
        )
    return None


def cmd_quota_show(args: argparse.Namespace) -> int:
    store = open_settings_store(load_settings())
    try:
        store.clients.get(args.client_id)
    except NotFound as exc:
        return fail(exc.message, ExitCode.NOT_FOUND)
    quota: Quota | UserQuota
    if args.user is not None:
        quota = store.quotas.get_user(args.client_id, args.user) or UserQuota()
    else:
        quota = store.quotas.get(args.client_id) or Quota()
    print_json(quota.model_dump(exclude_none=True))
    return 0


# --------------------------------------------------------------------------- library apply


def apply_library_dir(
    store: Store,
    directory: Path,
    out: TextIO | None = None,
    owner: str | None = None,
    listing: bool = True,
) -> int:
    """Apply ``directory`` to ``store`` (into ``owner``'s library: a client id, or the system's
    when None), printing one line per object (unless not ``listing``) and a summary; 1 on
    invalid files."""
    out = out or progress_stream()
    if owner is not None:
        try:
            store.clients.get(owner)
        except NotFound as exc:
            return fail(f"--client: {exc.message}", ExitCode.NOT_FOUND)
    try:
        report = apply_library(store, directory, utc_now(), owner=owner or SYSTEM)
    except InvalidInput as exc:
        print(f"wonder: library {directory} was not applied:\n{exc.message}", file=sys.stderr)
        return 1
    for item in report.applied:
        if item.changed:
            details = {
                "kind": item.kind,
                "id": item.id,
                "version": item.version,
                "owner": owner or SYSTEM,
                "from": str(directory),
            }
            cli_audit(store, "library.put", f"{item.kind}:{item.id}", details, owner)
        state = "new version" if item.changed else "unchanged"
        if listing:
            print(f"  {item.kind[:-1]:<14} {item.id:<28} v{item.version} ({state})", file=out)
    for warning in report.warnings:
        print(f"  warning: {warning}", file=out)
    changed = sum(1 for a in report.applied if a.changed)
    summary = f"{len(report.applied)} objects, {changed} new versions"
    print(summary if listing else f"==> library {directory}: {summary}", file=out)
    return 0


def cmd_library_apply(args: argparse.Namespace) -> int:
    settings = load_settings()
    store = open_settings_store(settings)
    code = apply_library_dir(store, Path(args.directory), owner=args.client_id)
    if json_mode():  # the listing went to stderr
        print_json({"applied": code == 0, "directory": str(args.directory)})
    return code
