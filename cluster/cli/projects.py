"""``wonder projects create|list|show|diff|merge``: projects (``/v1/projects``) and the working
branches of conversations and workflow runs (``.../diff``, ``.../merge``)."""

from __future__ import annotations

import argparse
from typing import Any

from cluster.cli.api_client import ApiError, client_of, segment
from cluster.cli.output import CliError, ExitCode, json_mode, print_document, print_json, table


def cmd_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "push_on_merge": args.push_on_merge}
    if args.repository:
        body["repository"] = args.repository
    if args.default_branch:
        body["default_branch"] = args.default_branch
    if args.username and not args.secret:
        raise CliError("--username goes with --secret (basic credentials)", ExitCode.USAGE)
    if args.secret:
        body["credentials"] = {"secret": args.secret}
        if args.username:
            body["credentials"].update({"scheme": "basic", "username": args.username})
    with client_of(args) as api:
        project = api.post("/v1/projects", body)
    if json_mode():
        print_json(project)
    else:
        print(f"{project['id']}  {project['name']}  (default branch {project['default_branch']})")
        if project.get("status") == "cloning":
            print(f"cloning: `wonder projects show {project['id']}` says when it is ready")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        page = api.get("/v1/projects")
    if json_mode():
        print_json(page)
        return 0
    table(
        ["PROJECT", "NAME", "BRANCH", "REPOSITORY"],
        [
            [p["id"], p["name"], p["default_branch"], p.get("origin") or p["repository"]]
            for p in page["items"]
        ],
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        project = api.get(f"/v1/projects/{segment(args.project_id)}")
    print_json(project) if json_mode() else print_document(project)
    return 0


def branch_path(args: argparse.Namespace) -> str:
    """The conversation's or the workflow run's routes, whichever was named."""
    if args.conversation_id:
        return f"/v1/conversations/{segment(args.conversation_id)}"
    return f"/v1/workflow-runs/{segment(args.run_id)}"


def cmd_diff(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        diff = api.get(f"{branch_path(args)}/diff")
    if json_mode():
        print_json(diff)
        return 0
    files = ", ".join(diff["files"]) or "no files"
    print(f"{diff['branch']} against {diff['base']}: {files}")
    if diff["diff"]:
        print(diff["diff"].rstrip("\n"))
    if diff["truncated"]:
        print("(the diff is truncated)")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    body = {"message": args.message} if args.message else None
    with client_of(args) as api:
        try:
            merged = api.request("POST", f"{branch_path(args)}/merge", body=body)
        except ApiError as exc:
            if exc.status == 409 and exc.details and json_mode():
                print_json({"status": "conflicts", "files": [d.get("path") for d in exc.details]})
            raise
    if json_mode():
        print_json(merged)
        return 0
    if merged["status"] == "up_to_date":
        print(f"nothing to merge: {merged['default_branch']} is up to date")
    else:
        pushed = " and pushed" if merged.get("pushed") else ""
        print(f"merged into {merged['default_branch']}{pushed} ({merged['commit']})")
    if merged.get("push_error"):
        raise CliError(f"merged, but the push failed: {merged['push_error']}")
    return 0
