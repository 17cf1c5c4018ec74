"""The command line of the API's resources: agents, conversations, turns, workflows, memories,
projects and library reads. Each command is one or two API calls (docs/api.md names them);
``--json`` prints the API's own JSON."""

from __future__ import annotations

import argparse

from cluster.cli.options import Commands

LIBRARY_KINDS = ("personas", "model-profiles", "tools", "tasks", "workflows")


def add_api_commands(commands: Commands) -> None:
    add_agents(commands)
    add_conversations(commands)
    add_turns(commands)
    add_workflows(commands)
    add_memories(commands)
    add_projects(commands)


def add_agents(commands: Commands) -> None:
    agents = commands.group("agents", help="your agents (API)")
    agents.leaf("list", "cluster.cli.agents:cmd_list", help="list your agents", api=True)
    show = agents.leaf("show", "cluster.cli.agents:cmd_show", help="show an agent", api=True)
    show.add_argument("agent_id", metavar="AGENT_ID")
    create = agents.leaf(
        "create",
        "cluster.cli.agents:cmd_create",
        help="create an agent on a library persona (or an inline one)",
        description="Create an agent named NAME on a persona of the library (--persona ID, "
        "your library's, else the system's) or on an inline persona read from a YAML or JSON "
        "file (--persona-file).",
        epilog="Example:\n  wonder agents create helper --persona memory_assistant",
        api=True,
    )
    create.add_argument("name", metavar="NAME")
    persona = create.add_mutually_exclusive_group(required=True)
    persona.add_argument("--persona", metavar="PERSONA_ID", help="a library persona")
    persona.add_argument("--persona-file", metavar="FILE", help="an inline persona (YAML/JSON)")
    create.add_argument("--persona-version", type=int, metavar="N", help="default: the latest")
    create.add_argument(
        "--persona-owner", metavar="OWNER", help="'system' for the system library's persona"
    )
    create.add_argument(
        "--project", dest="project_ids", action="append", default=[], metavar="PROJECT_ID",
        help="a project the agent works on (repeat for several)",
    )  # fmt: skip


def add_conversations(commands: Commands) -> None:
    conversations = commands.group("conversations", help="conversations: list, follow, fork (API)")
    listing = conversations.leaf(
        "list",
        "cluster.cli.conversations:cmd_list",
        help="list conversations, oldest first",
        description="List conversations (an acting --user sees those it is a member of), a "
        "page at a time; --all follows every page.",
        api=True,
    )
    listing.add_argument("--ancestry", choices=("roots", "children", "all"), default="all")
    listing.add_argument("--limit", type=int, default=50, help="page size (1-200)")
    listing.add_argument("--cursor", metavar="CURSOR", help="next_cursor of the previous page")
    listing.add_argument("--all", action="store_true", help="every page")
    listing.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE",
        help="another query parameter of GET /v1/conversations (repeat for several)",
    )  # fmt: skip
    show = conversations.leaf(
        "show", "cluster.cli.conversations:cmd_show", help="show a conversation", api=True
    )
    show.add_argument("conversation_id", metavar="CONVERSATION_ID")
    create = conversations.leaf(
        "create",
        "cluster.cli.conversations:cmd_create",
        help="start a conversation with an agent",
        api=True,
    )
    create.add_argument("--agent", dest="agent_id", metavar="AGENT_ID", required=True)
    create.add_argument("--title")
    create.add_argument("--project", dest="project_id", metavar="PROJECT_ID")
    send = conversations.leaf(
        "send",
        "cluster.cli.conversations:cmd_send",
        help="send a message (starts a turn); --wait prints the reply",
        description="Send TEXT to the conversation. Prints the turn it started; with --wait, "
        "follows that turn on the stream and prints the reply (exit 1 if the turn failed).",
        api=True,
    )
    send.add_argument("conversation_id", metavar="CONVERSATION_ID")
    send.add_argument("text", metavar="TEXT")
    send.add_argument("--wait", action="store_true", help="print the reply as it streams")
    tail = conversations.leaf(
        "tail",
        "cluster.cli.conversations:cmd_tail",
        help="follow a conversation: messages, token deltas, turn ends",
        description="Print the conversation's latest events, then follow its stream: messages "
        "as they are stored, the agent's tokens as they stream, turn ends and failures. If the "
        "connection drops it reconnects from the last seq it saw (nothing missed, nothing "
        "twice). Ctrl-C ends it (exit 130).",
        epilog="Examples:\n  wonder conversations tail conv_01...\n"
        "  wonder conversations tail conv_01... --after-seq 0 --no-follow   # the whole history\n"
        "  wonder conversations tail conv_01... --once   # until the next turn ends",
        api=True,
    )
    tail.add_argument("conversation_id", metavar="CONVERSATION_ID")
    tail.add_argument(
        "--after-seq", type=int, metavar="SEQ", help="replay every event after SEQ (0: all)"
    )
    tail.add_argument(
        "--lines", type=int, default=10, metavar="N", help="events shown before following"
    )
    tail.add_argument("--no-follow", action="store_true", help="print and stop")
    tail.add_argument(
        "--once", action="store_true", help="stop when a turn ends (exit 1 if it failed)"
    )
    fork = conversations.leaf(
        "fork",
        "cluster.cli.conversations:cmd_fork",
        help="fork a conversation at a turn",
        description="A new conversation whose history is the source's up to and including the "
        "turn (default: its latest turn).",
        api=True,
    )
    fork.add_argument("conversation_id", metavar="CONVERSATION_ID")
    fork.add_argument("--turn", dest="turn_id", metavar="TURN_ID", help="default: the latest turn")
    fork.add_argument("--title")
    complete = conversations.leaf(
        "complete",
        "cluster.cli.conversations:cmd_complete",
        help="mark a conversation completed",
        api=True,
    )
    complete.add_argument("conversation_id", metavar="CONVERSATION_ID")
    delete = conversations.leaf(
        "delete",
        "cluster.cli.conversations:cmd_delete",
        help="delete a conversation and every child conversation it started",
        description="Delete the conversation and the child conversations it started (refused "
        "while a fork inherits from any of them: delete the forks first).",
        api=True,
    )
    delete.add_argument("conversation_id", metavar="CONVERSATION_ID")


def add_turns(commands: Commands) -> None:
    turns = commands.group("turns", help="a conversation's turns and their moves (API)")
    listing = turns.leaf(
        "list", "cluster.cli.turns:cmd_list", help="list a conversation's turns", api=True
    )
    listing.add_argument("conversation_id", metavar="CONVERSATION_ID")
    show = turns.leaf(
        "show",
        "cluster.cli.turns:cmd_show",
        help="show a turn with its moves",
        description="A turn: its input, status, usage and model, and each move (reasoning, "
        "tool call and result).",
        api=True,
    )
    show.add_argument("conversation_id", metavar="CONVERSATION_ID")
    show.add_argument("turn_id", metavar="TURN_ID")


def add_workflows(commands: Commands) -> None:
    workflows = commands.group("workflows", help="workflow runs: run, status, cancel (API)")
    run = workflows.leaf(
        "run",
        "cluster.cli.workflows:cmd_run",
        help="start a run of a library workflow",
        description="Start a run of WORKFLOW_ID with --input (JSON) or --input-file. With "
        "--wait S it waits up to S seconds for the run to end (exit 1 if it failed).",
        epilog='Example:\n  wonder workflows run summarise --input \'{"text": "..."}\' --wait 60',
        api=True,
    )
    run.add_argument("workflow_id", metavar="WORKFLOW_ID")
    given = run.add_mutually_exclusive_group()
    given.add_argument(
        "--input", dest="input_json", metavar="JSON", help="the input, a JSON object"
    )
    given.add_argument("--input-file", metavar="FILE", help="the input from a JSON or YAML file")
    run.add_argument("--version", type=int, metavar="N", help="default: the latest")
    run.add_argument("--project", dest="project_id", metavar="PROJECT_ID")
    run.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="up to 300")
    status = workflows.leaf(
        "status", "cluster.cli.workflows:cmd_status", help="a run's status and nodes", api=True
    )
    status.add_argument("run_id", metavar="RUN_ID")
    cancel = workflows.leaf(
        "cancel", "cluster.cli.workflows:cmd_cancel", help="cancel a run", api=True
    )
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument("--reason", default="cancelled from the command line")
    listing = workflows.leaf(
        "list", "cluster.cli.workflows:cmd_list", help="your runs, newest first", api=True
    )
    listing.add_argument("--workflow", dest="workflow_id", metavar="WORKFLOW_ID")
    listing.add_argument("--limit", type=int, default=50)


def add_memories(commands: Commands) -> None:
    memories = commands.group("memories", help="an agent's memories (API)")
    search = memories.leaf(
        "search",
        "cluster.cli.memories:cmd_search",
        help="search an agent's memories",
        epilog="Example:\n  wonder memories search agent_01... 'which team is the user on' -k 3",
        api=True,
    )
    search.add_argument("agent_id", metavar="AGENT_ID")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("-k", type=int, default=5, help="how many (default 5)")
    search.add_argument("--mode", choices=("vector", "fts", "hybrid"), default="vector")
    search.add_argument(
        "--type", dest="types", action="append", default=[], metavar="TYPE",
        help="only memories of this type (repeat for several)",
    )  # fmt: skip
    search.add_argument("--include-consolidated", action="store_true")
    listing = memories.leaf(
        "list", "cluster.cli.memories:cmd_list", help="an agent's memories, newest first", api=True
    )
    listing.add_argument("agent_id", metavar="AGENT_ID")
    listing.add_argument("--type", dest="types", action="append", default=[], metavar="TYPE")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--cursor", metavar="CURSOR")


def add_projects(commands: Commands) -> None:
    projects = commands.group("projects", help="projects: create, diff and merge branches (API)")
    create = projects.leaf(
        "create",
        "cluster.cli.projects:cmd_create",
        help="create a project",
        description="A project from a local repository path, a URL Wonder clones, or nothing "
        "(a new repository).",
        api=True,
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument("--repository", metavar="PATH_OR_URL")
    create.add_argument("--default-branch", metavar="BRANCH")
    create.add_argument("--push-on-merge", action="store_true")
    create.add_argument(
        "--secret",
        metavar="NAME",
        help="one of your secrets, sent to the URL on each clone and push (a bearer token; with "
        "--username, the password of basic credentials)",
    )
    create.add_argument("--username", metavar="USER", help="with --secret: basic credentials")
    projects.leaf("list", "cluster.cli.projects:cmd_list", help="list your projects", api=True)
    show = projects.leaf("show", "cluster.cli.projects:cmd_show", help="show a project", api=True)
    show.add_argument("project_id", metavar="PROJECT_ID")
    diff = projects.leaf(
        "diff",
        "cluster.cli.projects:cmd_diff",
        help="what a conversation's (or a run's) branch changed",
        api=True,
    )
    merge = projects.leaf(
        "merge",
        "cluster.cli.projects:cmd_merge",
        help="merge a conversation's (or a run's) branch into the default branch",
        description="Merge the branch into the project's default branch; a conflict changes "
        "nothing and names the files (exit 1).",
        api=True,
    )
    for command in (diff, merge):
        owner = command.add_mutually_exclusive_group(required=True)
        owner.add_argument("--conversation", dest="conversation_id", metavar="CONVERSATION_ID")
        owner.add_argument("--run", dest="run_id", metavar="RUN_ID")
    merge.add_argument("--message", help="the merge commit's message")


def add_library_reads(library: Commands) -> None:
    listing = library.leaf(
        "list",
        "cluster.cli.library:cmd_list",
        help="list library objects of a kind (yours and the system's)",
        api=True,
    )
    listing.add_argument("kind", metavar="KIND", type=kind_name, help=", ".join(LIBRARY_KINDS))
    get = library.leaf(
        "get",
        "cluster.cli.library:cmd_get",
        help="get a library object (yours, else the system's)",
        epilog="Example:\n  wonder library get personas assistant",
        api=True,
    )
    get.add_argument("kind", metavar="KIND", type=kind_name, help=", ".join(LIBRARY_KINDS))
    get.add_argument("object_id", metavar="ID")
    get.add_argument("--version", type=int, metavar="N", help="default: the latest")
    get.add_argument("--system", action="store_true", help="the system library's object")


def kind_name(value: str) -> str:
    """A library kind as the API's path names it (``model_profiles`` and ``persona`` too)."""
    name = value.strip().lower().replace("_", "-")
    for kind in LIBRARY_KINDS:
        if name in (kind, kind.rstrip("s")):
            return kind
    raise argparse.ArgumentTypeError(f"{value!r}: one of {', '.join(LIBRARY_KINDS)}")
