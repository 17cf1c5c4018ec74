"""``wonder conversations ...``: ``/v1/conversations`` (list, show, create, send, tail, fork,
complete, delete)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from cluster.cli.api_client import ApiClient, client_of, segment, target_of
from cluster.cli.output import CliError, ExitCode, json_mode, print_document, print_json, table
from cluster.cli.tail import EventPrinter, StopRule, events_after, follow, recent_events

PAGE_LIMIT = 200  # the API's largest page


def query_params(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """``GET /v1/conversations``'s query: the named options, then each ``--param NAME=VALUE``."""
    params: list[tuple[str, Any]] = [("ancestry", args.ancestry), ("limit", args.limit)]
    if args.cursor:
        params.append(("after_cursor", args.cursor))
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--param takes NAME=VALUE, got {item!r}", ExitCode.USAGE)
        params.append((name, value))
    return params


def all_pages(api: ApiClient, params: list[tuple[str, Any]]) -> dict[str, Any]:
    """Every page of the listing, as one page (``next_cursor`` null)."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        asked = [p for p in params if p[0] != "after_cursor"]
        page = api.get("/v1/conversations", asked + ([("after_cursor", cursor)] if cursor else []))
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return {**page, "items": items, "next_cursor": None}


def origin(conversation: dict[str, Any]) -> str:
    """Where a conversation came from: a fork's source, a child's parent, else nothing."""
    if conversation.get("forked_from_conversation_id"):
        return f"fork of {conversation['forked_from_conversation_id']}"
    if conversation.get("started_by_conversation_id"):
        return f"child of {conversation['started_by_conversation_id']}"
    return ""


def cmd_list(args: argparse.Namespace) -> int:
    params = query_params(args)
    with client_of(args) as api:
        page = all_pages(api, params) if args.all else api.get("/v1/conversations", params)
    if json_mode():
        print_json(page)
        return 0
    table(
        ["CONVERSATION", "STATUS", "AGENT", "CREATED", "TITLE", "FROM"],
        [
            [
                c["id"],
                c["status"],
                c.get("agent_id"),
                c["created_at"][:19],
                c.get("title"),
                origin(c),
            ]
            for c in page["items"]
        ],
    )
    if page.get("next_cursor"):
        print(f"(more: --cursor {page['next_cursor']}, or --all)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        conversation = api.get(f"/v1/conversations/{segment(args.conversation_id)}")
    print_json(conversation) if json_mode() else print_document(conversation)
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    body = {"agent_id": args.agent_id, "title": args.title, "project_id": args.project_id}
    with client_of(args) as api:
        conversation = api.post("/v1/conversations", {k: v for k, v in body.items() if v})
    if json_mode():
        print_json(conversation)
    else:
        print(conversation["id"])
    return 0


def write_out(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def notice(text: str) -> None:
    print(f"[{text}]", file=sys.stderr, flush=True)


def cmd_send(args: argparse.Namespace) -> int:
    target = target_of(args)
    path = f"/v1/conversations/{segment(args.conversation_id)}/messages"
    with ApiClient(target) as api:
        accepted = api.post(path, {"content": args.text})
    if not args.wait:
        if json_mode():
            print_json(accepted)
        else:
            turn, message, seq = accepted["turn_id"], accepted["message_id"], accepted["seq"]
            print(f"turn {turn} (message {message}, seq {seq})")
        return 0
    printer = EventPrinter(json_lines=json_mode(), hide_user=True)
    stop = StopRule(once=True, turn_id=accepted["turn_id"])
    return run_follow(target, args.conversation_id, int(accepted["seq"]) - 1, printer, stop)


def run_follow(
    target: Any, conversation_id: str, after_seq: int, printer: EventPrinter, stop: StopRule
) -> int:
    try:
        return asyncio.run(
            follow(target, conversation_id, after_seq, write_out, printer, stop, notice)
        )
    except KeyboardInterrupt:
        write_out("\n" if printer.mid_line else "")
        return int(ExitCode.INTERRUPTED)


def cmd_tail(args: argparse.Namespace) -> int:
    target = target_of(args)
    printer = EventPrinter(json_lines=json_mode())
    with ApiClient(target) as api:
        if args.after_seq is not None:
            start = max(args.after_seq, 0)
            shown = events_after(api, args.conversation_id, start) if args.no_follow else []
        else:
            recent = recent_events(api, args.conversation_id, args.lines)
            start = int(recent[-1]["seq"]) if recent else 0
            shown = recent[-args.lines :] if args.lines > 0 else []
    for event in shown:
        write_out(printer.render(event))
    if args.no_follow:
        write_out("\n" if printer.mid_line else "")
        return 0
    return run_follow(target, args.conversation_id, start, printer, StopRule(once=args.once))


def latest_turn(api: ApiClient, conversation_id: str) -> str:
    turns = api.get(f"/v1/conversations/{segment(conversation_id)}/turns")["items"]
    if not turns:
        raise CliError(f"conversation {conversation_id} has no turn to fork at", ExitCode.FAILURE)
    return str(turns[-1]["id"])


def cmd_fork(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        turn_id = args.turn_id or latest_turn(api, args.conversation_id)
        body = {"turn_id": turn_id} | ({"title": args.title} if args.title else {})
        fork = api.post(f"/v1/conversations/{segment(args.conversation_id)}/forks", body)
    if json_mode():
        print_json(fork)
    else:
        print(f"{fork['id']}  (fork of {args.conversation_id} at {turn_id})")
    return 0


def cmd_complete(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        conversation = api.post(f"/v1/conversations/{segment(args.conversation_id)}/complete")
    if json_mode():
        print_json(conversation)
    else:
        print(f"{conversation['id']} {conversation['status']}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        deleted = api.delete(f"/v1/conversations/{segment(args.conversation_id)}")
    if json_mode():
        print_json(deleted)
    else:
        print(f"deleted {', '.join(deleted['deleted'])}")
    return 0
