"""What ``wonder up`` remembers in the data dir, and where the gateway is.

``wonder-up.json`` (what was deployed), ``first-client.json`` (the first client, its key and its
agent; mode 0600) and ``wonder-up.log`` (Ray's and Serve's log records of ``wonder up``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from core.settings import Settings

UP_FILE = "wonder-up.json"
FIRST_CLIENT_FILE = "first-client.json"
UP_LOG_FILE = "wonder-up.log"


def gateway_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.gateway_host in ("0.0.0.0", "") else settings.gateway_host
    return f"http://{host}:{settings.gateway_port}"


def state_path(settings: Settings, name: str) -> Path:
    return settings.data_dir.resolve() / name


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_private(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)


def remembered_key(settings: Settings) -> str | None:
    """The API key ``wonder up`` made for the first client, if any."""
    key = read_json(state_path(settings, FIRST_CLIENT_FILE)).get("api_key")
    return str(key) if key else None
