"""MCP servers as tool sources: what a registration holds, and the pure rules that turn a server's
tool listing into library tools and a tool call's result into a ``ToolResult``'s outcome.

A client registers a server (``PUT /v1/mcp-servers/{id}``): streamable HTTP (``url``, checked
against the operator's ``WONDER_MCP_ALLOWED_HOSTS``, ``core.egress``) or stdio (``command``, run
in the same sandbox as ``shell.exec``, with no network). Its tools become tools of the client's
library, one per tool the server lists (``mcp.<server>.<tool>``, ``target_type: mcp``), which a
persona selects by id like any tool; the listing is taken again when the server says it changed.

Everything a server says is untrusted text: a description is cut to the library's limit and
stripped of control characters; an input schema loses what would make validating it unsafe or
slow (regular-expression ``pattern``s, references outside the schema) and falls back to a plain
object when it is not a valid schema; results are cut to ``MAX_RESULT_CHARS``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import Field, ValidationError, model_validator

from core.client_secrets import SecretRef
from core.domain import LibraryId, Model, Tool, ToolRetry
from core.errors import ErrorCode, PermissionDenied
from core.jsontypes import JsonObject
from core.ports import TaskOutcome, failed_outcome

TOOL_ID_PREFIX = "mcp."
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_BYTES = 64_000
MAX_SCHEMA_DEPTH = 32
MAX_RESULT_CHARS = 32_000
MAX_TOOLS = 256
HEADER_NAME_PATTERN = r"^[A-Za-z0-9-]{1,64}$"
# Headers that carry credentials: only from a secret (``secret_headers``), never stored in clear.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})
# Headers the transport sets itself.
TRANSPORT_HEADERS = frozenset(
    {"host", "content-length", "content-type", "accept", "mcp-session-id", "mcp-protocol-version"}
)
_UNSAFE_SCHEMA_KEYS = frozenset({"pattern", "patternProperties", "$dynamicRef", "$id", "$anchor"})
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


class McpServer(Model):
    """A registered MCP server of one client."""

    id: LibraryId
    client_id: str
    transport: Literal["http", "stdio"]
    url: str | None = Field(None, max_length=2000, description="http: the server's MCP endpoint")
    command: list[str] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="stdio: the program and its arguments, run in the sandbox (no network)",
    )
    headers: dict[str, str] = Field(
        default_factory=dict, max_length=32, description="http: plain headers (no credentials)"
    )
    secret_headers: dict[str, SecretRef] = Field(
        default_factory=dict, max_length=8, description="http: headers whose value is a secret"
    )
    tool_prefix: str = Field(
        "", pattern=r"^[A-Za-z0-9_-]{0,20}$", description="Put before each tool's name"
    )
    timeout_s: float = Field(60.0, gt=0, le=3600, description="A tool call's time limit")
    tool_ids: list[str] = Field(default_factory=list, description="The library tools it gave")
    listed_at: datetime | None = None
    created_at: datetime
    updated_at: datetime

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServer:
        if self.transport == "http":
            if self.url is None or self.command is not None:
                raise ValueError("transport http needs url (and no command)")
        elif self.command is None or self.url is not None or self.headers or self.secret_headers:
            raise ValueError("transport stdio needs command (and no url or headers)")
        for name in [*self.headers, *self.secret_headers]:
            if not re.match(HEADER_NAME_PATTERN, name):
                raise ValueError(f"headers: {name!r} is not a header name")
            if name.lower() in TRANSPORT_HEADERS:
                raise ValueError(f"headers: {name} is set by the transport")
        for name, value in self.headers.items():
            if name.lower() in CREDENTIAL_HEADERS:
                raise ValueError(f"headers: {name} carries a credential: use secret_headers")
            if len(value) > 2000 or not re.match(r"^[\x20-\x7e]*$", value):
                raise ValueError(f"headers: the value of {name} is not printable ASCII")
        for arg in self.command or []:
            if not arg or len(arg) > 4096 or "\x00" in arg:
                raise ValueError("command: each argument is 1-4096 characters, no NUL")
        return self

    @property
    def key(self) -> str:
        """Which connection serves it: the client, the server and this registration's time
        (a changed registration gets a new connection)."""
        return f"{self.client_id}/{self.id}/{self.updated_at.isoformat()}"


def check_stdio_command(command: list[str], allowed: list[str]) -> None:
    """A stdio server's program must be one the operator listed (``WONDER_MCP_STDIO_COMMANDS``),
    matched exactly: no path resolution a client could play with (``/usr/bin/../bin/sh``)."""
    program = command[0] if command else ""
    if program not in allowed:
        listed = ", ".join(allowed) if allowed else "none: stdio servers are off"
        raise PermissionDenied(
            f"command: {clean_text(program, 200)!r} is not a program stdio MCP servers may run "
            f"(WONDER_MCP_STDIO_COMMANDS: {listed})"
        )


class ListedTool(Model):
    """One tool as the server lists it (``tools/list``), before any of it is trusted."""

    model_config = Model.model_config | {"extra": "ignore"}

    name: str = Field(min_length=1, max_length=500)
    title: str | None = None
    description: str | None = None
    input_schema: Any = None


def listed_tool(dumped: JsonObject) -> ListedTool | None:
    """One entry of a ``tools/list`` answer (its JSON), or None when it is no usable tool (no
    name, a name longer than 500 characters, text where text belongs not text): skipped, the
    rest of the listing kept."""
    try:
        return ListedTool(
            name=dumped.get("name"),
            title=dumped.get("title"),
            description=dumped.get("description"),
            input_schema=dumped.get("inputSchema"),
        )
    except ValidationError:
        return None


def tool_id_for(server_id: str, name: str) -> str:
    """The library id of a server's tool: ``mcp.<server>.<name>`` (characters outside the id
    alphabet become ``-``; a digest keeps long ones unique within the id's 128 characters)."""
    safe = re.sub(r"[^A-Za-z0-9_.:-]", "-", name)
    candidate = f"{TOOL_ID_PREFIX}{server_id}.{safe}"
    if len(candidate) <= 128:
        return candidate
    digest = hashlib.sha256(f"{server_id}\0{name}".encode()).hexdigest()[:16]
    return f"{candidate[: 128 - 17]}-{digest}"


def tool_name_for(prefix: str, name: str) -> str:
    """The name the model calls it by: ``<prefix><name>`` in the tool-name alphabet, ≤ 64."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", f"{prefix}{name}")
    if len(safe) <= 64:
        return safe
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[:55]}_{digest}"


def target_of(tool: Tool) -> tuple[str, str]:
    """``(server id, the server's tool name)`` of an ``mcp`` tool."""
    server_id, _, name = tool.target_id.partition("/")
    return server_id, name


def clean_text(text: str | None, limit: int) -> str:
    """Untrusted text made safe to show a model: no control or direction-override characters
    (newlines and tabs kept), at most ``limit`` characters."""
    cleaned = _CONTROL.sub("", text or "")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def clean_schema(schema: Any) -> JsonObject:
    """A server's input schema made safe to validate with: regular expressions and references
    outside it removed; a plain object schema when what is left is not a valid one."""
    fallback: JsonObject = {"type": "object"}
    if not isinstance(schema, dict):
        return fallback
    try:
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            return fallback
    except (TypeError, ValueError):
        return fallback
    cleaned = _without_unsafe(schema, 0)
    if not isinstance(cleaned, dict) or cleaned.get("type", "object") != "object":
        return fallback
    try:
        Draft202012Validator.check_schema(cleaned)
    except SchemaError:
        return fallback
    return cleaned


def _without_unsafe(value: Any, depth: int) -> Any:
    if depth > MAX_SCHEMA_DEPTH:
        return {}
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if key in _UNSAFE_SCHEMA_KEYS:
                continue
            if key == "$ref" and not (isinstance(item, str) and item.startswith("#")):
                continue
            kept[str(key)] = _without_unsafe(item, depth + 1)
        return kept
    if isinstance(value, list):
        return [_without_unsafe(item, depth + 1) for item in value]
    return value


def library_tool(server: McpServer, listed: ListedTool) -> Tool:
    """The library tool for one of the server's tools."""
    description = clean_text(listed.description or listed.title or listed.name, 1800)
    return Tool(
        id=tool_id_for(server.id, listed.name),
        name=tool_name_for(server.tool_prefix, listed.name),
        description=f"{description} (MCP server {server.id})",
        input_schema=clean_schema(listed.input_schema),
        target_type="mcp",
        target_id=f"{server.id}/{listed.name}",
        retry=ToolRetry(max_attempts=1, timeout_ms=int(server.timeout_s * 1000)),
    )


def library_tools(server: McpServer, listed: list[ListedTool]) -> list[Tool]:
    """The library tools for a listing (the first ``MAX_TOOLS``): distinct ids and distinct
    names the model calls them by, the first listed of colliding ones kept (``a.b`` and ``a_b``
    are both ``a_b`` to the model: one tool must not shadow another)."""
    ids: set[str] = set()
    names: set[str] = set()
    tools: list[Tool] = []
    for item in listed[:MAX_TOOLS]:
        tool = library_tool(server, item)
        if tool.id not in ids and tool.name not in names:
            ids.add(tool.id)
            names.add(tool.name)
            tools.append(tool)
    return tools


def outcome_of(result: JsonObject) -> TaskOutcome:
    """A ``tools/call`` result (its JSON) as a tool outcome: the text of its content (images,
    audio and binary resources described, not inlined), its structured content, and
    ``isError`` as a failed outcome the model sees."""
    parts = [_content_text(item) for item in result.get("content") or [] if isinstance(item, dict)]
    text = clean_text("\n".join(p for p in parts if p), MAX_RESULT_CHARS)
    if result.get("isError") is True:
        return failed_outcome(ErrorCode.EXECUTION_FAILED, text or "the MCP tool failed")
    answer: JsonObject = {"content": text}
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        encoded = json.dumps(structured)
        if len(encoded) <= MAX_RESULT_CHARS:
            answer["structured"] = structured
    return TaskOutcome.ok(answer)


def _content_text(item: JsonObject) -> str:
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text") or "")
    if kind in ("image", "audio"):
        size = len(str(item.get("data") or "")) * 3 // 4
        return f"[{kind} {item.get('mimeType') or ''}, {size} bytes]"
    if kind == "resource":
        resource = item.get("resource")
        if isinstance(resource, dict):
            if isinstance(resource.get("text"), str):
                return f"[resource {resource.get('uri')}]\n{resource['text']}"
            return f"[resource {resource.get('uri')} {resource.get('mimeType') or ''}]"
    if kind == "resource_link":
        return f"[resource link {item.get('uri')}: {item.get('name') or ''}]"
    return f"[{kind} content]"


# --------------------------------------------------------------------------- ports


class McpTools(Protocol):
    """Connections to registered MCP servers (one per server, kept open while used)."""

    async def list_tools(self, server: McpServer) -> list[ListedTool]:
        """The server's tools (every page); ``RetryableError`` when it cannot be reached."""
        ...

    async def call_tool(
        self, server: McpServer, name: str, arguments: JsonObject, timeout_s: float
    ) -> TaskOutcome:
        """One ``tools/call``: its result, or a failed outcome the model sees (the tool's error,
        a protocol error); ``RetryableError`` when the server cannot be reached, ``Timeout``
        past ``timeout_s``."""
        ...

    async def forget(self, client_id: str, server_id: str) -> None:
        """Close the server's connection (it was changed or deleted)."""
        ...


class SecretResolver(Protocol):
    """The client's secrets, read where a registration references one (``secret_headers``):
    ``core.secret_vault.SecretVault`` (blocking: call it off an event loop)."""

    def resolve(self, client_id: str | None, name: str, where: str) -> str:
        """The value of ``client_id``'s secret ``name`` (``NotFound`` when it has none)."""
        ...


# What a connection calls when a server says its tool list changed (``tools/list_changed``).
ToolsChanged = Callable[[McpServer], Awaitable[None]]
