"""``wonder memories search|list``: an agent's memories (``/v1/agents/{id}/memories``)."""

from __future__ import annotations

import argparse
from typing import Any

from cluster.cli.api_client import client_of, segment
from cluster.cli.output import json_mode, print_json, table


def cmd_search(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "query": args.query,
        "k": args.k,
        "mode": args.mode,
        "types": args.types,
        "include_consolidated": args.include_consolidated,
    }
    with client_of(args) as api:
        found = api.post(f"/v1/agents/{segment(args.agent_id)}/memories/search", body)
    if json_mode():
        print_json(found)
        return 0
    table(
        ["SCORE", "TYPE", "MEMORY", "SUBJECT", "CONTENT"],
        [
            [f"{m['score']:.3f}", m["type"], m["id"], m.get("subject"), m["content"]]
            for m in found["items"]
        ],
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    params: list[tuple[str, Any]] = [("limit", args.limit)] + [("types", t) for t in args.types]
    if args.cursor:
        params.append(("after_cursor", args.cursor))
    with client_of(args) as api:
        page = api.get(f"/v1/agents/{segment(args.agent_id)}/memories", params)
    if json_mode():
        print_json(page)
        return 0
    table(
        ["MEMORY", "TYPE", "SIGNIFICANCE", "SUBJECT", "CONTENT"],
        [
            [m["id"], m["type"], m.get("significance"), m.get("subject"), m["content"]]
            for m in page["items"]
        ],
    )
    if page.get("next_cursor"):
        print(f"(more: --cursor {page['next_cursor']})")
    return 0
