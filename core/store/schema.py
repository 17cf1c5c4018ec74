"""Tables of the relational store.

Each row keeps the columns we filter or order by, plus ``data``: the pydantic model as JSON.
Adding a field to a model needs no migration; adding a queried column does (see ``migrations``).
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

SCHEMA_VERSION = 1

schema_info = Table(
    "schema_info",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)

clients = Table(
    "clients",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("data", Text, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_hash", String(128), primary_key=True),
    Column("client_id", String(64), nullable=False, index=True),
    Column("created_at", String(40), nullable=False),
    # Issue 13 (added to existing databases by ``columns.add_missing_columns``): a key's name, its
    # scope (admin | app; none = a key made before scopes: admin), expiry and revocation.
    Column("name", String(100), nullable=True),
    Column("scope", String(16), nullable=True),
    Column("expires_at", String(40), nullable=True),
    Column("revoked_at", String(40), nullable=True),
)

# Versioned library objects: personas, model profiles, tools, tasks, workflows.
library_objects = Table(
    "library_objects",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("id", String(128), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("data", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

agents = Table(
    "agents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=True),
    Column("started_by_conversation_id", String(64), nullable=True, index=True),
    Column("created_at", String(40), nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_conversations_client_created", "client_id", "created_at", "id"),
)

turns = Table(
    "turns",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("conversation_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_turns_conversation", "conversation_id", "id"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("conversation_id", String(64), nullable=False),
    Column("turn_id", String(64), nullable=False, index=True),
    Column("seq", Integer, nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_messages_conversation_seq", "conversation_id", "seq"),
)

moves = Table(
    "moves",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("turn_id", String(64), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("data", Text, nullable=False),
    UniqueConstraint("turn_id", "sequence", name="uq_moves_turn_sequence"),
)

events = Table(
    "events",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("data", Text, nullable=False),
)

# Who may append to a conversation's log (docs/architecture.md, "Who writes a conversation's
# log"): the conversation actor holds the lease while it is resident (``holder`` set, ``epoch``
# raised at each activation, so a former incarnation's writes are refused); while ``holder`` is
# null, a writer without the actor (the gateway's intake, the async-operations runner) may append.
conversation_writers = Table(
    "conversation_writers",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("holder", String(200), nullable=True),
    Column("since", String(40), nullable=False),
)

context_entries = Table(
    "context_entries",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("value", Text, nullable=False),
)

# Workflow runs (one row per run) and their node history (one row per token: a visit to a node).
workflow_runs = Table(
    "workflow_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workflow_id", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("client_id", String(64), nullable=True, index=True),
    Column("parent_run_id", String(64), nullable=True, index=True),
    Column("created_at", String(40), nullable=False),
    Column("data", Text, nullable=False),
)

workflow_node_history = Table(
    "workflow_node_history",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("token_id", String(32), nullable=False),
    Column("node_id", String(64), nullable=False),
    Column("state", String(32), nullable=False),
    Column("data", Text, nullable=False),
)

# Async tool operations: recorded before dispatch, completed by the runner, delivered exactly once.
async_operations = Table(
    "async_operations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("conversation_id", String(64), nullable=False, index=True),
    Column("turn_id", String(64), nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("data", Text, nullable=False),
)

# Sessions (seed 004) and sub-agent sessions (seed 002): a stable label → a conversation.
sessions = Table(
    "sessions",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("label", String(300), primary_key=True),
    Column("conversation_id", String(64), nullable=False),
    Column("created_at", String(40), nullable=False),
)

# Projects (issue 14): a git repository agents are scoped to; conversations get a branch in it.
projects = Table(
    "projects",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# Issue 14: where each workspace's worktree lives (its spec and the node holding it).
workspaces = Table(
    "workspaces",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("project_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# Issue 17: quotas per client, operator (admin) keys, and the audit trail of changes.
quotas = Table(
    "quotas",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("updated_at", String(40), nullable=False),
    Column("data", Text, nullable=False),
)

# Issue 17: quotas per user inside a client (the users a client names with ``X-Wonder-User``).
user_quotas = Table(
    "user_quotas",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("user_id", String(200), primary_key=True),
    Column("updated_at", String(40), nullable=False),
    Column("data", Text, nullable=False),
)

admin_keys = Table(
    "admin_keys",
    metadata,
    Column("key_hash", String(128), primary_key=True),
    Column("created_at", String(40), nullable=False),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=True, index=True),
    Column("subject_client_id", String(64), nullable=True, index=True),
    Column("data", Text, nullable=False),
    # Issue 25: the columns the audit route filters by (null in entries recorded before them).
    Column("action", String(64), nullable=True, index=True),
    Column("key_id", String(64), nullable=True, index=True),
    Column("user_id", String(200), nullable=True, index=True),
    Column("target", String(300), nullable=True),
    Column("at", String(40), nullable=True),
)

# Issue 25: short-lived, single-use stream tickets (a browser opens a WebSocket with one instead of
# its API key, so the key never lands in a URL). Stored by hash; redeeming one deletes its row.
stream_tickets = Table(
    "stream_tickets",
    metadata,
    Column("ticket_hash", String(128), primary_key=True),
    Column("client_id", String(64), nullable=False),
    Column("key_hash", String(128), nullable=False),
    Column("user_id", String(200), nullable=True),
    Column("conversation_id", String(64), nullable=False),
    Column("expires_at", String(40), nullable=False, index=True),
)

# Issue 13: each client's own library objects (the ``library_objects`` table above is the system
# library, shipped with Wonder and read-only to clients). Same shape, plus the owning client.
client_library_objects = Table(
    "client_library_objects",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("id", String(128), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("data", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

# Issue 13: users' access to a conversation (seed 003's memberships): one row per member.
conversation_members = Table(
    "conversation_members",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("user_id", String(200), primary_key=True),
    Column("level", String(16), nullable=False),
    Column("granted_at", String(40), nullable=False),
    Column("granted_by", String(200), nullable=True),
    Index("ix_conversation_members_user", "user_id", "conversation_id"),
)

# Issue 11: forks (seed 003). One row per fork: its source, the turn it forks at, and its lineage —
# the (conversation, last turn, last seq) segments whose entries it inherits, root first.
forks = Table(
    "forks",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False),
    Column("source_conversation_id", String(64), nullable=False, index=True),
    Column("forked_at_turn_id", String(64), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("lineage", Text, nullable=False),
)

# Issue 11: secrets the server generates once and every process shares (the page-cursor key).
server_secrets = Table(
    "server_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(128), nullable=False),
)

# Issue 10: memory extractions still to run for completed turns (seed 001 runs extraction after
# the turn completes). A row is written with the turn's completion and deleted once extraction
# is settled, so an actor that restarts in between runs it again (``actors.conversation``).
pending_extractions = Table(
    "pending_extractions",
    metadata,
    Column("conversation_id", String(64), primary_key=True),
    Column("turn_id", String(64), primary_key=True),
    Column("data", Text, nullable=False),
)

# Issue 11: a message's per-turn model override (seed 004), written with the message by the
# gateway, and the model its turn actually used, recorded when the turn's context is assembled.
turn_models = Table(
    "turn_models",
    metadata,
    Column("message_id", String(64), primary_key=True),
    Column("turn_id", String(64), nullable=True, index=True),
    Column("data", Text, nullable=False),
)

# Issue 11: webhooks — a signing secret per hook and the routing rule its messages follow.
hooks = Table(
    "hooks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# Issue 11: webhook deliveries seen inside the replay window, by their signature (an HMAC of the
# timestamp and body): a repeat is answered with the first one's result, never a second turn.
# ``result`` is null while the first is being posted; rows go once ``expires_at`` has passed.
hook_deliveries = Table(
    "hook_deliveries",
    metadata,
    Column("hook_id", String(64), primary_key=True),
    Column("signature", String(200), primary_key=True),
    Column("expires_at", String(40), nullable=False, index=True),
    Column("result", Text),
)

# Issue 11: cron triggers, and one row per (trigger, due time) fired: the scheduler claims a due
# time by inserting it, so a due time fires at most once, across scheduler restarts too.
cron_triggers = Table(
    "cron_triggers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False, index=True),
    Column("next_due", String(40), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

trigger_fires = Table(
    "trigger_fires",
    metadata,
    Column("trigger_id", String(64), primary_key=True),
    Column("due_at", String(40), primary_key=True),
)

# Memory upkeep on a schedule (core.memory_upkeep): one row per agent whose persona or agent sets
# a policy, plus one for the memories table's compaction (``key`` "table:memories"). The
# scheduler claims a due time by moving ``next_due`` from the value it read (a conditional update),
# so a due time starts at most one run.
memory_upkeep = Table(
    "memory_upkeep",
    metadata,
    Column("key", String(80), primary_key=True),
    Column("client_id", String(64), nullable=True, index=True),
    Column("next_due", String(40), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# Semantic message search (core.message_search): a message's embedding, made the first time a
# search of its conversation needs it (float32 bytes, unit length), per embedding model.
message_embeddings = Table(
    "message_embeddings",
    metadata,
    Column("message_id", String(64), primary_key=True),
    Column("conversation_id", String(64), nullable=False, index=True),
    Column("model", String(128), nullable=False),
    Column("vector", LargeBinary, nullable=False),
)

# How a routed message found its conversation (core.smart_routing: the candidates and their
# scores, the one chosen) and the permissions it carries, written by the gateway with the message
# (like ``turn_models``: never by the conversation's log writer).
message_routes = Table(
    "message_routes",
    metadata,
    Column("message_id", String(64), primary_key=True),
    Column("conversation_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# Client secrets (docs/security.md "Secrets"): write-only values a client stores and references by
# name from model profiles, http.request headers and shell commands. ``sealed`` is the value
# encrypted with the operator's key (AES-GCM, nonce included; the client, name and version are
# its associated data), ``key_id`` names that key; the metadata is ``data`` (never the value).
client_secrets = Table(
    "client_secrets",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("key_id", String(32), nullable=False),
    Column("sealed", Text, nullable=False),
    Column("data", Text, nullable=False),
)

# A client's registered MCP servers (docs/protocols.md): the registration as JSON in ``data``.
mcp_servers = Table(
    "mcp_servers",
    metadata,
    Column("client_id", String(64), primary_key=True),
    Column("id", String(128), primary_key=True),
    Column("data", Text, nullable=False),
)
# Model calls (docs/observability.md): each request a model was sent, exactly as sent, and what it
# answered, one row per call, written by the process that made the call (never through a
# conversation's log). ``data`` holds the record; a request or response body larger than the
# inline limit lives in the object store and ``data`` names its key. Rows older than the
# retention setting are deleted.
model_calls = Table(
    "model_calls",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("client_id", String(64), nullable=True),
    Column("conversation_id", String(64), nullable=True),
    Column("turn_id", String(64), nullable=True, index=True),
    Column("agent_id", String(64), nullable=True),
    Column("run_id", String(64), nullable=True, index=True),
    Column("node_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost", Float, nullable=True),
    Column("currency", String(3), nullable=True),
    Column("created_at", String(40), nullable=False, index=True),
    Column("data", Text, nullable=False),
    Index("ix_model_calls_conversation", "conversation_id", "created_at"),
    Index("ix_model_calls_client", "client_id", "created_at"),
    Index("ix_model_calls_agent", "agent_id", "created_at"),
)

# Spans of turns' traces (OpenTelemetry's model: trace id, span id, parent), recorded by the
# process that ran each span, so a turn's span tree is read from here without a tracing backend.
spans = Table(
    "spans",
    metadata,
    Column("trace_id", String(32), primary_key=True),
    Column("span_id", String(16), primary_key=True),
    Column("parent_span_id", String(16), nullable=True),
    Column("conversation_id", String(64), nullable=True),
    Column("turn_id", String(64), nullable=True),
    Column("name", String(200), nullable=False),
    Column("started_at", String(40), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

# The trace a turn joins when it does not start its own: a delegated child's turn, a workflow's
# agent call, a message whose request carried a W3C ``traceparent``.
turn_traces = Table(
    "turn_traces",
    metadata,
    Column("turn_id", String(64), primary_key=True),
    Column("trace_id", String(32), nullable=False),
    Column("parent_span_id", String(16), nullable=True),
)

# What a turn caused, beside what its own rows say: hook runs, workflow runs, delegated children,
# memory writes, the model it used. One row per (turn, kind, target); written by whoever caused
# it, never through the conversation's log.
turn_links = Table(
    "turn_links",
    metadata,
    Column("turn_id", String(64), primary_key=True),
    Column("kind", String(32), primary_key=True),
    Column("target_id", String(200), primary_key=True),
    Column("conversation_id", String(64), nullable=True, index=True),
    Column("at", String(40), nullable=False),
    Column("data", Text, nullable=True),
)
