"""``wonder library list|get``: library objects as a client sees them (``/v1/<kind>``; yours and
the system's). ``wonder library apply`` writes the store directly: ``operator``."""

from __future__ import annotations

import argparse
from typing import Any

from cluster.cli.api_client import client_of, segment
from cluster.cli.output import json_mode, print_document, print_json, table


def describe(obj: dict[str, Any]) -> str:
    return str(obj.get("description") or obj.get("name") or obj.get("model") or "")


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        page = api.get(f"/v1/{args.kind}")
    if json_mode():
        print_json(page)
        return 0
    table(
        ["ID", "VERSION", "OWNER", "DESCRIPTION"],
        [[o["id"], o.get("version"), o.get("owner"), describe(o)] for o in page["items"]],
    )
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {}
    if args.version is not None:
        params["version"] = args.version
    if args.system:
        params["owner"] = "system"
    with client_of(args) as api:
        obj = api.get(f"/v1/{args.kind}/{segment(args.object_id)}", params)
    print_json(obj) if json_mode() else print_document(obj)
    return 0
