"""``wonder down`` and ``wonder status``, and what ``wonder up`` shares with them: the first
client it makes, waiting for the gateway, the dashboard's address.

Only Ray's bootstrap is imported here; Serve and the apps are imported where they are deployed
(``up``), which a ``wonder down`` after attaching to a cluster loads to delete them.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx

from cluster import bootstrap
from cluster.cli.handlers import resolve
from cluster.cli.operator import create_client_key
from cluster.cli.output import json_mode, print_json, say
from cluster.cli.state import (
    FIRST_CLIENT_FILE,
    UP_FILE,
    gateway_url,
    read_json,
    state_path,
    write_private,
)
from core.domain import Agent, PersonaRef
from core.ids import new_id, utc_now
from core.settings import Settings, load_settings

GATEWAY_READY_TIMEOUT_S = 120.0
DELETE_ATTACHED_APPS = "cluster.cli.up:delete_attached_apps"  # imports Serve: only when attached


def first_client(settings: Settings, store: Any) -> dict[str, Any]:
    """The first client, its key and its default agent: made once, remembered in the data dir."""
    path = state_path(settings, FIRST_CLIENT_FILE)
    known = read_json(path)
    remembered = store.keys.find(known["api_key"]) if known.get("api_key") else None
    if remembered is not None and remembered.refusal(utc_now()) is None:
        return known
    client_id, key = create_client_key(store, "local")
    agent = Agent(
        id=new_id("agent"),
        client_id=client_id,
        name="assistant",
        persona_ref=PersonaRef(id="assistant"),
        created_at=utc_now(),
    )
    store.agents.insert(agent)
    known = {"client_id": client_id, "api_key": key, "agent_id": agent.id}
    write_private(path, known)
    return known


def wait_for_gateway(url: str, timeout: float = GATEWAY_READY_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=5, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def dashboard_url(settings: Settings) -> str:
    head = bootstrap.read_head(settings)
    port = head.dashboard_port if head else settings.dashboard_port
    token = f"  (Ray token in {head.token_path})" if head and head.token_path else ""
    return f"http://127.0.0.1:{port}{token}"


def cmd_down(args: argparse.Namespace) -> int:
    settings = load_settings()
    path = state_path(settings, UP_FILE)
    state = read_json(path)
    if state.get("attached") and state.get("apps"):
        resolve(DELETE_ATTACHED_APPS)(settings, state)
    stopped = bootstrap.stop_local_head(settings, say)
    path.unlink(missing_ok=True)
    if not stopped and not state:
        say("nothing to stop: no Wonder started from this data dir is running")
    else:
        say("Wonder is down")
    if json_mode():
        print_json({"stopped": bool(stopped or state)})
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    settings = load_settings()
    state = read_json(state_path(settings, UP_FILE))
    head = bootstrap.read_head(settings)
    url = state.get("gateway_url") or gateway_url(settings)
    healthy = wait_for_gateway(url, timeout=3)
    if json_mode():
        print_json(status_summary(settings, state, head, url, healthy))
        return 0 if healthy else 1
    if head is not None:
        print(f"ray head   running  pid {head.pid}  {head.address}  log {head.log_file}")
    elif settings.ray_address:
        print(f"ray        attached to {settings.ray_address}")
    else:
        print("ray head   not running")
    print(f"gateway    {'up' if healthy else 'not answering'}  {url}")
    if state.get("apps"):
        print(f"apps       {', '.join(state['apps'])}")
    return 0 if healthy else 1


def status_summary(
    settings: Settings,
    state: dict[str, Any],
    head: bootstrap.HeadInfo | None,
    url: str,
    healthy: bool,
) -> dict[str, Any]:
    """``wonder status --json``."""
    return {
        "ray_head": None
        if head is None
        else {"pid": head.pid, "address": head.address, "log": head.log_file},
        "attached_to": settings.ray_address,
        "gateway": {"url": url, "healthy": healthy},
        "apps": list(state.get("apps") or []),
    }
