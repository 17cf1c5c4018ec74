"""``wonder turns list|show``: a conversation's turns and a turn's moves
(``/v1/conversations/{id}/turns``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cluster.cli.api_client import client_of, segment
from cluster.cli.output import json_mode, print_json, table

TEXT_CHARS = 400


def _clip(text: str, limit: int = TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tokens(turn: dict[str, Any]) -> str:
    usage = turn.get("usage") or {}
    return f"{usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)}"


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        page = api.get(f"/v1/conversations/{segment(args.conversation_id)}/turns")
    if json_mode():
        print_json(page)
        return 0
    table(
        ["TURN", "STATUS", "CREATED", "TOKENS", "INPUT"],
        [
            [t["id"], t["status"], t["created_at"][:19], tokens(t), t["input"]]
            for t in page["items"]
        ],
    )
    return 0


def move_lines(move: dict[str, Any]) -> list[str]:
    """One move for a person: its reasoning, its tool call and the call's result."""
    lines = [f"move {move['sequence']}"]
    if move.get("reasoning"):
        lines.append(f"  reasoning: {_clip(move['reasoning'])}")
    call = move.get("tool_call")
    if call:
        lines.append(f"  tool call: {call['name']} {_clip(json.dumps(call.get('input')))}")
    result = move.get("tool_result")
    if result:
        if result.get("success"):
            lines.append(f"  result:    {_clip(json.dumps(result.get('result')))}")
        else:
            error = result.get("error") or {}
            lines.append(f"  failed:    {error.get('code')}: {_clip(str(error.get('message')))}")
    return lines


def turn_lines(turn: dict[str, Any]) -> list[str]:
    lines = [
        f"turn       {turn['id']}  ({turn['status']})",
        f"input      {_clip(turn['input'])}",
        f"created    {turn['created_at']}",
        f"tokens     {tokens(turn)} (prompt+completion)",
    ]
    if turn.get("failure_reason"):
        lines.append(
            f"failure    {turn.get('failure_code') or ''} {turn['failure_reason']}".rstrip()
        )
    used = (turn.get("model") or {}).get("used")
    if used:
        profile, provider, model = (used.get(k) for k in ("model_profile_id", "provider", "model"))
        lines.append(f"model      {profile} ({provider} {model})")
    if turn.get("inherited_from"):
        lines.append(f"inherited  from {turn['inherited_from']}")
    lines.append(f"moves      {len(turn.get('moves') or [])}")
    for move in turn.get("moves") or []:
        lines += move_lines(move)
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        turn = api.get(
            f"/v1/conversations/{segment(args.conversation_id)}/turns/{segment(args.turn_id)}"
        )
    if json_mode():
        print_json(turn)
    else:
        print("\n".join(turn_lines(turn)))
    return 0
