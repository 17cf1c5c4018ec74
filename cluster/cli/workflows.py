"""``wonder workflows run|status|cancel|list``: workflow runs (``/v1/workflows/{id}/runs``,
``/v1/workflow-runs``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from cluster.cli.api_client import TIMEOUT_S, ApiClient, client_of, segment, target_of
from cluster.cli.output import CliError, ExitCode, json_mode, print_json, table

MAX_WAIT_S = 300.0
FINISHED = {"completed", "failed", "cancelled"}


def run_input(args: argparse.Namespace) -> dict[str, Any]:
    """The run's input: ``--input JSON``, ``--input-file`` (JSON or YAML), else ``{}``."""
    if args.input_file:
        try:
            text = Path(args.input_file).read_text()
        except OSError as exc:
            raise CliError(
                f"--input-file: cannot read {args.input_file}: {exc.strerror}", ExitCode.USAGE
            ) from None
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CliError(f"--input-file: not JSON or YAML: {exc}", ExitCode.USAGE) from None
    elif args.input_json:
        try:
            value = json.loads(args.input_json)
        except ValueError as exc:
            raise CliError(f"--input: not JSON: {exc}", ExitCode.USAGE) from None
    else:
        value = {}
    if not isinstance(value, dict):
        raise CliError("the input must be a JSON object", ExitCode.USAGE)
    return value


def outcome(view: dict[str, Any]) -> int:
    """A run's exit code: 1 once it failed or was cancelled, else 0."""
    return int(
        ExitCode.FAILURE if view["run"]["status"] in ("failed", "cancelled") else ExitCode.OK
    )


def run_lines(view: dict[str, Any]) -> list[str]:
    run = view["run"]
    lines = [
        f"run       {run['id']}  ({run['status']})",
        f"workflow  {run['workflow_id']} v{run['workflow_version']}",
        f"created   {run['created_at']}",
    ]
    if run.get("finished_at"):
        lines.append(f"finished  {run['finished_at']}")
    if run["status"] == "completed":
        lines.append(f"output    {json.dumps(run.get('output'))}")
    if run.get("error"):
        lines.append(f"error     {run['error']['code']}: {run['error']['message']}")
    nodes = view.get("nodes") or []
    if nodes:
        lines.append("nodes")
        for node in nodes:
            error = f"  {node['error']['message']}" if node.get("error") else ""
            where = f"{node['node_id']:<20} {node['kind']:<10}"
            lines.append(f"  {node['seq']:>3}  {where} {node['state']}{error}")
    return lines


def show_run(view: dict[str, Any]) -> None:
    if json_mode():
        print_json(view)
    else:
        print("\n".join(run_lines(view)))


def cmd_run(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "input": run_input(args),
        "wait_s": min(max(args.wait, 0.0), MAX_WAIT_S),
    }
    if args.version is not None:
        body["version"] = args.version
    if args.project_id:
        body["project_id"] = args.project_id
    with ApiClient(target_of(args), timeout_s=body["wait_s"] + TIMEOUT_S) as api:
        view = api.post(f"/v1/workflows/{segment(args.workflow_id)}/runs", body)
    show_run(view)
    return outcome(view) if view["run"]["status"] in FINISHED else 0


def cmd_status(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        view = api.get(f"/v1/workflow-runs/{segment(args.run_id)}")
    show_run(view)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        view = api.post(f"/v1/workflow-runs/{segment(args.run_id)}/cancel", {"reason": args.reason})
    show_run(view)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.workflow_id:
        params["workflow_id"] = args.workflow_id
    with client_of(args) as api:
        page = api.get("/v1/workflow-runs", params)
    if json_mode():
        print_json(page)
        return 0
    table(
        ["RUN", "WORKFLOW", "STATUS", "CREATED"],
        [
            [
                r["id"],
                f"{r['workflow_id']} v{r['workflow_version']}",
                r["status"],
                r["created_at"][:19],
            ]
            for r in page["items"]
        ],
    )
    return 0
