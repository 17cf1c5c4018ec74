"""Settings: every location and limit is a ``WONDER_*`` environment variable, never a code change.

The defaults are the embedded single-machine setup of ARCHITECTURE.md §1: a data directory holding
the SQLite file, the LanceDB directory and the object-store directory.
"""

from __future__ import annotations

import ipaddress
import json
import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.allow_list import parse_entry
from core.client_address import Network, parse_networks
from core.cron import parse_cron
from core.errors import InvalidInput
from core.memory.tuning import VectorIndexKind, VectorTuning

URL_SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})


class LlmModelSettings(BaseModel):
    """One more model served beside the primary one (``WONDER_LLM_MODELS``, a JSON list).

    Each runs as its own deployment of the ``llm`` application and answers to ``name`` (and to
    its LoRA adapters' names); profiles pick it with ``model: <name>``.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    model_dir: str = Field(description="Local Hugging Face directory or s3:// prefix")
    num_replicas: int = Field(1, ge=1)
    min_replicas: int | None = Field(None, ge=0, description="Autoscaling floor (0 allowed here)")
    max_replicas: int | None = Field(None, ge=1, description="Set to autoscale")
    tensor_parallel: int = Field(1, ge=1)
    pipeline_parallel: int = Field(1, ge=1)
    max_model_len: int | None = None
    lora_modules: dict[str, str] = Field(default_factory=dict, description="adapter name → dir")
    max_lora_rank: int = Field(16, ge=1)


class ProjectSources(BaseModel):
    """Where one client's projects may come from (``WONDER_PROJECT_CLIENT_SOURCES``)."""

    model_config = ConfigDict(extra="forbid")

    path_roots: list[str] = Field(default_factory=list)
    url_schemes: list[str] = Field(default_factory=lambda: ["https"])
    url_hosts: list[str] = Field(default_factory=list)
    credential_hosts: list[str] = Field(default_factory=list)

    @field_validator("url_schemes")
    @classmethod
    def _schemes(cls, value: list[str]) -> list[str]:
        return known_schemes(value)


def known_schemes(value: list[str]) -> list[str]:
    """``value`` when every scheme in it is one Wonder clones over (``ValueError`` otherwise)."""
    unknown = sorted(set(value) - URL_SCHEMES)
    if unknown:
        raise ValueError(f"unknown URL schemes {unknown} (known: {sorted(URL_SCHEMES)})")
    return value


class Settings(BaseSettings):
    """Wonder's settings, read from ``WONDER_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="WONDER_", extra="ignore")

    data_dir: Path = Field(Path("var"), description="Root of the embedded stores")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default SQLite in data_dir")
    lance_uri: str | None = Field(None, description="LanceDB URI; default data_dir/lance")
    object_uri: str | None = Field(None, description="Object store URI; default data_dir/objects")
    database_pool_size: int = Field(
        1, ge=1, description="Connections each process keeps open to a server database"
    )
    database_pool_overflow: int = Field(
        4, ge=0, description="Extra connections a process may open briefly (never more)"
    )
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint for s3:// URIs")
    # Memory vector search (core/memory/tuning.py, docs/internals/memory.md "Indexes").
    memory_vector_index: VectorIndexKind = Field(
        "ivf_sq", description="Vector index the compact job builds: ivf_sq, ivf_pq, ivf_hnsw_sq"
    )
    memory_partition_rows: int | None = Field(
        None, ge=1, description="Rows per IVF partition when the index is built; None: √rows"
    )
    memory_nprobes: int = Field(20, ge=1, description="IVF partitions each memory search probes")
    memory_refine_factor: int = Field(
        1, ge=1, description="Re-score refine_factor * pool candidates on full vectors"
    )
    memory_flat_max_rows: int = Field(
        1000,
        ge=0,
        description="Agents with at most this many searchable memories (not folded into a "
        "summary) are searched exactly",
    )
    memory_resident_mib: int = Field(
        256, ge=0, description="MiB per process for agents' resident vectors (0: none)"
    )
    memory_resident_max_rows: int = Field(
        50_000, ge=0, description="Agents with more memories are searched through the index"
    )
    memory_compact_schedule: str = Field(
        "41 * * * *",
        description="When the platform compacts the memories table and folds new rows into its "
        "indexes (five cron fields, UTC); 'off': never (run `wonder job compact` yourself)",
    )
    memory_upkeep_reconcile_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How often the scheduler reads agents' memory upkeep policies",
    )
    token_linger_ms: float = Field(
        10.0,
        ge=0,
        le=1000,
        description="A reply's token deltas wait up to this long to be published with what "
        "follows them (more deltas, or the reply's stored message): fewer relays per reply, "
        "each delta at most this much later (0: every delta at once)",
    )
    extraction_quiet_s: float = Field(
        0.5,
        ge=0,
        le=3600,
        description="A completed turn's memory extraction waits until no turn of its "
        "conversation has run a step for this long (0: it runs at once, beside the next turn)",
    )
    extraction_max_wait_s: float = Field(
        30.0,
        gt=0,
        le=86400,
        description="A memory extraction runs after waiting this long even if its conversation "
        "never quiets",
    )

    # Observability (docs/observability.md): model call records, turn traces, their retention.
    record_model_calls: bool = Field(
        True, description="Record every model call's request and response (GET .../calls)"
    )
    tracing: bool = Field(
        True, description="Record each turn's spans (GET .../trace); OTLP export follows OTEL_*"
    )
    record_retention_days: int = Field(
        30, ge=0, description="Model call records and spans older than this are deleted (0: kept)"
    )
    record_inline_max_bytes: int = Field(
        32_768,
        ge=1024,
        description="A request or response body larger than this is kept in the object store",
    )

    ray_address: str | None = Field(None, description="Ray cluster to attach to; None = start one")
    ray_namespace: str = Field("wonder", description="Ray namespace of Wonder's named actors")
    ray_num_cpus: int | None = Field(None, description="Logical CPUs for a locally started Ray")

    gateway_host: str = Field(
        "127.0.0.1", description="Address the gateway (Serve's proxy) listens on"
    )
    gateway_port: int = Field(8000, description="Port of the gateway: REST, WebSocket and /llm/v1")
    gateway_num_replicas: int = Field(
        1, ge=1, description="Gateway replicas (Serve spreads them over non-accelerator nodes)"
    )
    gateway_max_replicas_per_node: int = Field(
        1, ge=1, description="At most this many gateway replicas on one node (a lost node's share)"
    )
    serve_proxy_location: Literal["EveryNode", "HeadOnly"] = Field(
        "EveryNode",
        description="Where Serve runs its HTTP proxies: EveryNode (each node with a replica, "
        "behind a load balancer) or HeadOnly (one proxy on the head)",
    )
    gateway_niceness: int = Field(
        0,
        ge=0,
        le=19,
        description="CPU niceness of the gateway replicas and the Serve proxy (Ray runs its "
        "other workers at 15 once started; a starting worker runs at 0 and would outrank them)",
    )
    scheduler_tick_s: float = Field(
        5.0, gt=0, le=60, description="How often the cron scheduler looks for due triggers"
    )
    hook_replay_window_s: float = Field(
        300.0, gt=0, description="How old (or early) a signed webhook delivery may be"
    )
    trusted_proxies: str = Field(
        "",
        description="Reverse proxies whose X-Forwarded-For the audit trail believes: addresses "
        "or networks, comma-separated (default: none; the TCP peer is the client)",
    )
    stream_ticket_ttl_s: float = Field(
        30.0, gt=0, le=300, description="How long a stream ticket may wait to be used (once)"
    )
    cursor_secret: SecretStr | None = Field(
        None, description="Signs page cursors; default: a secret the store makes once (shared)"
    )
    dashboard_port: int = Field(8265, description="Ray dashboard port of a locally started head")

    conversation_idle_ttl_s: float = Field(
        600.0, gt=0, description="An idle conversation actor persists and exits after this long"
    )
    max_resident_conversations: int = Field(
        64, ge=1, description="Live conversation actors at most (the idlest leave first)"
    )
    max_starting_conversations: int | None = Field(
        None,
        ge=1,
        description="Conversation actors starting at once (a burst queues behind them); "
        "None: half the cluster's CPUs, at least 1 (a process start takes a core)",
    )
    conversation_reserve: int = Field(
        2, ge=0, description="Conversation actors kept started for conversations not yet created"
    )
    max_waiting_conversations: int = Field(
        512, ge=0, description="Activations queued for a start slot before refusing with 503"
    )
    max_delegation_depth: int = Field(
        3, ge=0, le=20, description="How deep agents may delegate to agents"
    )

    # Egress (docs/security.md "Egress"): where http.request and model providers may connect.
    http_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Where http.request may connect: host, host:port, an IP address or a "
        "network (10.0.0.0/8), each optionally with :port; private, loopback and link-local "
        "addresses only when listed as addresses",
    )
    model_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Where an openai-provider model profile's base_url may point (same forms); "
        "the local deployment (127.0.0.1 and localhost at gateway_port) is always allowed",
    )
    http_max_response_bytes: int = Field(
        1_000_000, ge=1024, description="Bytes of a response body http.request reads at most"
    )
    http_max_redirects: int = Field(
        5, ge=0, le=20, description="Redirects http.request follows (each hop checked)"
    )
    # Defaults that hold under abuse (docs/security.md "Quotas"): each default quota applies to
    # every client whose stored quota leaves that field out (0: no default).
    quota_default_concurrent_turns: int = Field(64, ge=0, description="Active turns per client")
    quota_default_concurrent_websockets: int = Field(
        256, ge=0, description="Open WebSockets per client (per gateway replica)"
    )
    quota_default_conversations: int = Field(
        100_000, ge=0, description="Conversations stored per client"
    )
    quota_default_concurrent_runs: int = Field(
        64, ge=0, description="Workflow runs (subworkflows included) pending or running per client"
    )
    quota_default_triggers: int = Field(100, ge=0, description="Cron triggers stored per client")
    workflow_max_nodes_per_run: int = Field(
        10_000, ge=1, le=1_000_000, description="The highest max_tokens a workflow may have"
    )
    workflow_max_depth: int = Field(8, ge=0, le=64, description="Subworkflow nesting per run")
    trigger_min_interval_s: int = Field(
        300, ge=60, description="The shortest time between two firings of one cron trigger"
    )
    list_max_items: int = Field(
        1000, ge=1, description="Items an unpaged listing returns (library objects, triggers)"
    )
    # Client secrets (docs/security.md "Secrets").
    secrets_key: SecretStr | None = Field(
        None, description="Operator key sealing client secrets (32 bytes, URL-safe base64)"
    )
    secrets_key_file: Path | None = Field(
        None, description="Key file used when secrets_key is unset; default data_dir/secrets.key"
    )
    # MCP servers as tool sources (docs/protocols.md).
    mcp_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Where MCP servers registered over HTTP may be: host names, addresses or "
        "networks, each with an optional :port (loopback and private addresses only when an "
        "address entry lists them; docs/protocols.md)",
    )
    mcp_stdio_commands: list[str] = Field(
        default_factory=list,
        description="Programs a stdio MCP server may be started with (a command's first "
        "argument, matched exactly: an absolute path or a name looked up on the sandbox's PATH); "
        "empty: no stdio servers (docs/protocols.md)",
    )
    mcp_stdio_cpu_s: int = Field(
        3600, ge=1, description="RLIMIT_CPU of a stdio MCP server's sandboxed process"
    )
    mcp_idle_s: float = Field(
        600.0, gt=0, description="An MCP server connection unused this long is closed"
    )

    # What library code may run (docs/security.md).
    library_callables: list[str] = Field(
        default_factory=list,
        description="Extra callables for `python` actions: modules (their @library_callable "
        "functions) or 'module:function' entries, beside the shipped library's",
    )
    allow_test_doubles: bool = Field(
        False, description="Accept the `scripted` model provider (tests; off in production)"
    )
    action_timeout_s: float = Field(600.0, gt=0, description="Time limit of one task action")
    action_output_max_bytes: int = Field(
        1_000_000, ge=1024, description="Largest result (as JSON) one task action may return"
    )
    executor_memory_limit_mb: int | None = Field(
        4096,
        ge=64,
        description="How much a task may grow its executor worker's data segment (RLIMIT_DATA, "
        "set for the task's duration above what the worker holds when it starts); None = no limit",
    )
    executor_pool_size: int = Field(
        2,
        ge=0,
        le=64,
        description="Long-lived executor processes that run a turn's hooks (started with the "
        "gateway, restarted when one dies); a caller using them all runs its next hook as a Ray "
        "task, as every other task runs. 0 = every task is a Ray task",
    )
    project_path_roots: list[str] = Field(
        default_factory=list,
        description="Directories whose repositories a project may name by path or file:// URL "
        "(symlinks resolved; never inside data_dir); empty: no local repositories",
    )
    project_url_schemes: list[str] = Field(
        default_factory=lambda: ["https"],
        description="URL schemes a project may be cloned over: https, http, ssh, git, file",
    )
    project_url_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts a project may be cloned from (name, *.domain, or * for any public "
        "host, each optionally :port); empty: no remote repositories",
    )
    project_credential_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts a project's credentials (a secret of its client) may be sent to, over "
        "https (name, *.domain, * for any host the client may clone from; http only to a loopback "
        "address named here); empty: no credentials",
    )
    project_client_sources: dict[str, ProjectSources] = Field(
        default_factory=dict,
        description="Per client id: the repository sources of that client (replaces the four "
        "settings above for it)",
    )
    project_clone_timeout_s: float = Field(
        600.0, gt=0, description="Longest a clone may take (then the project fails)"
    )
    project_clone_workers: int = Field(
        2, ge=1, description="Clones a gateway replica runs at once (others wait their turn)"
    )
    project_clones_per_client: int = Field(
        4, ge=1, description="Clones one client may have waiting or running at once"
    )
    workspace_idle_ttl_s: float = Field(600.0, gt=0, description="Idle workspace actors exit")
    workspaces_dir: Path | None = Field(
        None,
        description="Where worktrees live; default data_dir/workspaces (may be node-local: a "
        "workspace actor is pinned to the node holding its worktree)",
    )
    shell_timeout_s: float = Field(60.0, gt=0, le=3600, description="Default shell.exec timeout")
    shell_cpu_s: int = Field(120, ge=1, description="RLIMIT_CPU of a shell.exec command")
    shell_memory_mb: int = Field(2048, ge=16, description="RLIMIT_AS of a shell.exec command")
    shell_file_size_mb: int = Field(256, ge=1, description="RLIMIT_FSIZE of a shell.exec command")
    shell_output_bytes: int = Field(64_000, ge=1, description="stdout/stderr cap per command")
    shell_hidden_paths: list[str] = Field(
        default_factory=lambda: ["/tmp", "/root", "/home", "/var/tmp", "/dev/shm", "/run"],
        description="Host directories a shell.exec sandbox sees empty (besides the data dir)",
    )
    shell_max_processes: int = Field(
        256, ge=8, description="Processes and threads one shell.exec command may have at once"
    )
    shell_cgroup_dir: str | None = Field(
        None,
        description="A cgroup directory (v2 delegated with the pids controller, or v1 pids) for "
        "per-command process limits; None: this process's v1 pids cgroup when writable",
    )
    shell_tmp_mb: int = Field(512, ge=1, description="Size of a shell.exec command's private /tmp")
    shell_disk_mb: int = Field(
        8192, ge=1, description="What a workspace's worktree may hold on disk (its quota)"
    )
    shell_max_files: int = Field(
        500_000, ge=100, description="Files and directories a workspace's worktree may hold"
    )
    shell_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts shell.exec may reach through the egress proxy, for personas that ask "
        "(name, *.domain, *, an IP; each optionally :port); empty: no network",
    )
    shell_client_hosts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per client id: the hosts that client's commands may reach (replaces "
        "shell_allowed_hosts for it)",
    )
    shell_egress_networks: list[str] = Field(
        default_factory=list,
        description="Non-public networks (CIDR) the egress proxy may connect to: loopback, "
        "private, link-local... are refused unless listed here",
    )
    shell_egress_ports: list[int] = Field(
        default_factory=lambda: [80, 443],
        description="Ports a host pattern without :port allows",
    )

    llm_model_dir: str | None = Field(None, description="Model directory served by vLLM")
    llm_device: str = Field("cpu", description="cpu or cuda")
    llm_deploy: bool = Field(True, description="Deploy the local vLLM model with `wonder up`")
    model_cache: str | None = Field(
        None, description="Cache of converted/downloaded models; default ~/.cache/wonder/models"
    )
    llm_model_name: str | None = Field(
        None, description="Name the local model is served as (it also answers to 'default')"
    )
    llm_enforce_eager: bool = Field(True, description="vLLM without torch.compile/CUDA graphs")
    llm_max_model_len: int | None = Field(None, description="vLLM context length; None = model's")
    llm_cpu_kvcache_gb: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU")
    llm_num_replicas: int = Field(1, ge=1, description="vLLM replicas (one GPU each on cuda)")
    llm_accelerator_type: str | None = Field(
        None, description="Ray accelerator_type for vLLM replicas on cuda (e.g. A10G, H100)"
    )
    llm_min_replicas: int | None = Field(None, ge=0, description="Autoscaling floor")
    llm_max_replicas: int | None = Field(None, ge=1, description="Autoscaling ceiling")
    llm_target_ongoing_requests: float = Field(8.0, gt=0, description="Streams per replica")
    llm_upscale_delay_s: float = Field(
        10.0, ge=0, description="Autoscaling: load held this long adds a replica"
    )
    llm_downscale_delay_s: float = Field(
        120.0, ge=0, description="Autoscaling: idleness held this long removes a replica"
    )
    llm_allow_scale_to_zero: bool = Field(
        False, description="Let the primary model scale to 0 (a first message then waits)"
    )
    llm_graceful_shutdown_s: float = Field(
        300.0, gt=0, description="How long a replica being removed may drain its open streams"
    )
    llm_max_ongoing_requests: int = Field(64, ge=1, description="Streams one replica takes at once")
    llm_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU niceness of the vLLM replicas and their engine processes (Ray runs its "
        "workers at 15; on a CPU node the engine decodes on the cores everything else uses; "
        "0 decodes fastest but delays the conversation actors' relay of first tokens)",
    )
    llm_stream_frames_per_s: float = Field(
        64.0,
        ge=0,
        description="Token batches a replica sends per second, shared by its open streams: each "
        "stream gets one batch per (open streams / this) s at most; 0 sends every engine step",
    )
    llm_stream_max_interval_ms: float = Field(
        250.0, ge=0, description="The longest a streamed token waits for its batch (ms)"
    )
    llm_tensor_parallel: int = Field(1, ge=1, description="GPUs per model copy (tensor parallel)")
    llm_pipeline_parallel: int = Field(1, ge=1, description="Pipeline stages per model copy")
    llm_prefix_routing: bool = Field(True, description="Keep a conversation on one replica")
    llm_affinity_max_ongoing: int = Field(
        32, ge=1, description="Above this many streams a replica loses its conversations' affinity"
    )
    llm_lora_modules: dict[str, str] = Field(
        default_factory=dict, description="LoRA adapters of the primary model: name → directory"
    )
    llm_max_lora_rank: int = Field(16, ge=1, description="Largest LoRA rank the engine accepts")
    llm_models: list[LlmModelSettings] = Field(
        default_factory=list, description="More models served side by side (JSON list)"
    )

    # Placement on a multi-node cluster (cluster/placement.py decides from these).
    accelerator_resource: str = Field(
        "wonder_accelerator",
        description="Custom Ray resource accelerator nodes advertise (one unit per vLLM replica)",
    )
    actors_on_accelerator_nodes: bool = Field(
        False, description="Conversations, coordinators, executor tasks may use accelerator nodes"
    )
    llm_placement: Literal["auto", "accelerator", "any"] = Field(
        "auto", description="auto|accelerator|any: auto = accelerator nodes when llm_device=cuda"
    )
    embedder_placement: Literal["cpu", "accelerator", "any"] = Field(
        "cpu", description="cpu|accelerator|any: where embedder replicas go"
    )

    @field_validator("memory_compact_schedule")
    @classmethod
    def _compact_schedule(cls, value: str) -> str:
        if value.strip().lower() in ("", "off"):
            return "off"
        try:
            parse_cron(value)
        except InvalidInput as exc:
            raise ValueError(exc.message) from None
        return value.strip()

    @property
    def compact_schedule(self) -> str | None:
        """The memories table's compaction schedule, None when it is off."""
        return None if self.memory_compact_schedule == "off" else self.memory_compact_schedule

    @field_validator("shell_egress_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # a ValueError names the bad entry
        return value

    @field_validator("project_url_schemes")
    @classmethod
    def _schemes(cls, value: list[str]) -> list[str]:
        return known_schemes(value)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        parse_networks(value)  # a ValueError names the bad entry
        return value

    @cached_property
    def trusted_networks(self) -> tuple[Network, ...]:
        return parse_networks(self.trusted_proxies)

    @field_validator("http_allowed_hosts", "model_allowed_hosts", "mcp_allowed_hosts")
    @classmethod
    def _destinations(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if entry.strip():
                parse_entry(entry)  # a ValueError names the entry
        return entries

    @cached_property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'wonder.db').resolve()}"

    @cached_property
    def memory_tuning(self) -> VectorTuning:
        return VectorTuning(
            index=self.memory_vector_index,
            partition_rows=self.memory_partition_rows,
            nprobes=self.memory_nprobes,
            refine_factor=self.memory_refine_factor,
            flat_max_rows=self.memory_flat_max_rows,
            resident_mib=self.memory_resident_mib,
            resident_max_rows=self.memory_resident_max_rows,
        )

    @cached_property
    def resolved_lance_uri(self) -> str:
        return self.lance_uri or str((self.data_dir / "lance").resolve())

    @cached_property
    def resolved_object_uri(self) -> str:
        return self.object_uri or str((self.data_dir / "objects").resolve())

    def env(self) -> dict[str, str]:
        """These settings as ``WONDER_*`` variables, for Ray runtime environments."""
        out: dict[str, str] = {}
        # The secrets key never travels in runtime environments (the Ray dashboard shows them):
        # each process reads it from its own environment or the key file.
        for name, value in self.model_dump(exclude_none=True, exclude={"secrets_key"}).items():
            if isinstance(value, list | dict):
                out[f"WONDER_{name.upper()}"] = json.dumps(value)
            else:
                out[f"WONDER_{name.upper()}"] = str(value)
        out["WONDER_DATA_DIR"] = str(self.data_dir.resolve())
        return out


def load_settings() -> Settings:
    """Settings from the environment (a fresh read each call: tests change the environment)."""
    return Settings()


def settings_from_env(settings_env: dict[str, str] | None = None) -> Settings:
    """Settings from explicit ``WONDER_*`` variables (parsed once per distinct set: hot path).

    Without variables, this process's environment is read (a fresh read each call).
    """
    if not settings_env:
        return Settings()
    return _settings_for(tuple(sorted(settings_env.items())))


@lru_cache(maxsize=32)
def _settings_for(items: tuple[tuple[str, str], ...]) -> Settings:
    return Settings(**_settings_kwargs(dict(items)))


def _settings_kwargs(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("WONDER_"):
            continue
        name = key.removeprefix("WONDER_").lower()
        if name not in Settings.model_fields:
            continue
        out[name] = json.loads(value) if value.startswith(("[", "{")) else value
    return out


def wonder_env(source: dict[str, str] | None = None) -> dict[str, str]:
    """The ``WONDER_*`` variables of ``source`` (default: this process's environment)."""
    items = (source if source is not None else os.environ).items()
    return {k: v for k, v in items if k.startswith("WONDER_")}
