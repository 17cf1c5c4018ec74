"""``wonder agents list|show|create``: ``/v1/agents``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from cluster.cli.api_client import client_of, segment
from cluster.cli.output import CliError, ExitCode, json_mode, print_document, print_json, table


def cmd_list(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        page = api.get("/v1/agents")
    if json_mode():
        print_json(page)
        return 0
    table(
        ["AGENT", "NAME", "PERSONA", "CREATED"],
        [[a["id"], a["name"], persona_of(a), a["created_at"][:19]] for a in page["items"]],
    )
    return 0


def persona_of(agent: dict[str, Any]) -> str:
    """How an agent's persona reads in a table: ``id`` (``@version``), or ``inline``."""
    ref = agent.get("persona_ref")
    if isinstance(ref, dict):
        version = f"@{ref['version']}" if ref.get("version") else ""
        return f"{ref['id']}{version}"
    return "inline"


def cmd_show(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        agent = api.get(f"/v1/agents/{segment(args.agent_id)}")
    print_json(agent) if json_mode() else print_document(agent)
    return 0


def read_persona_file(path: str) -> dict[str, Any]:
    """An inline persona from a YAML or JSON file (JSON is YAML)."""
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise CliError(
            f"--persona-file: cannot read {path}: {exc.strerror}", ExitCode.USAGE
        ) from None
    except yaml.YAMLError as exc:
        raise CliError(
            f"--persona-file: {path} is not YAML or JSON: {exc}", ExitCode.USAGE
        ) from None
    if not isinstance(loaded, dict):
        raise CliError(f"--persona-file: {path} must hold a mapping (a persona)", ExitCode.USAGE)
    loaded.setdefault("id", Path(path).stem)
    return loaded


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"name": args.name, "project_ids": args.project_ids}
    if args.persona_file:
        body["persona"] = read_persona_file(args.persona_file)
    else:
        ref: dict[str, Any] = {"id": args.persona}
        if args.persona_version is not None:
            ref["version"] = args.persona_version
        if args.persona_owner is not None:
            ref["owner"] = args.persona_owner
        body["persona_ref"] = ref
    return body


def cmd_create(args: argparse.Namespace) -> int:
    with client_of(args) as api:
        agent = api.post("/v1/agents", create_body(args))
    if json_mode():
        print_json(agent)
    else:
        print(f"{agent['id']}  {agent['name']}  (persona {persona_of(agent)})")
    return 0
