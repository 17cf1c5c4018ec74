"""Wonder as an MCP server: ``/mcp`` (streamable HTTP), for any MCP client.

- **Tools**: each of the client's agents (or those named by ``?agents=a,b``) is a tool named by
  its id: ``{"message": ..., "conversation_id"?: ...}`` in, the agent's answer out (text, and
  ``structuredContent`` with the conversation and turn). A call runs one turn through the REST
  message path (``agent_turns``); with a ``progressToken`` the call streams progress
  notifications (the model's words, the tools the agent calls) until the answer.
- **Resources**: the client's conversations (``wonder://conversations/{id}``): reading one gives
  its messages as JSON; a template names any of them.

Same key and access rules as the REST API: ``Authorization: Bearer <key>`` (401 without one),
``X-Wonder-User`` for an acting user (a conversation the user may not read is not found; one it
may not write to refuses the call). Stateless streamable HTTP (a fresh MCP session per request:
any gateway replica answers any request); no server-to-client requests (sampling, elicitation).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Annotated, Any

import mcp_types as types
from fastapi import APIRouter, Query, Request
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from core.domain import Agent
from core.errors import NotFound, WonderError
from serving.gateway.agent_turns import (
    AgentSaid,
    Asker,
    Reconciler,
    TokenDelta,
    ToolMove,
    TurnEnded,
    answer_of,
    follow_turn,
    readable_conversation,
    start_turn,
)
from serving.gateway.auth import ClientId, Context, Guard, User

router = APIRouter(tags=["mcp"])

SCOPE_KEY = "wonder.mcp"
ANSWER_TIMEOUT_S = 600.0
RESOURCE_PREFIX = "wonder://conversations/"
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for a resource not found
MAX_RESOURCES = 100
MAX_MESSAGES = 500
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "maxLength": 100_000},
        "conversation_id": {
            "type": "string",
            "maxLength": 64,
            "description": "Continue this conversation with the agent (default: a new one)",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


class _Caller:
    """What the HTTP request established (its key's client, the acting user, the agents)."""

    def __init__(self, asker: Asker, agents: frozenset[str] | None) -> None:
        self.asker = asker
        self.agents = agents


def _caller(ctx: ServerRequestContext[Any, Any]) -> _Caller:
    request = ctx.request
    scope = getattr(request, "scope", None)
    caller = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    if not isinstance(caller, _Caller):
        raise RuntimeError("an MCP request without the gateway's authentication")
    return caller


def _agents(caller: _Caller) -> list[Agent]:
    asker = caller.asker
    agents = asker.context.store.agents.list_for_client(asker.client_id)
    return [
        a
        for a in agents
        if TOOL_NAME.match(a.id) and (caller.agents is None or a.id in caller.agents)
    ]


def _tool(agent: Agent) -> types.Tool:
    persona = agent.persona_ref.id if agent.persona_ref else "inline persona"
    return types.Tool(
        name=agent.id,
        title=agent.name,
        description=f"Ask the agent {agent.name!r} ({persona}): one turn, its answer.",
        input_schema=INPUT_SCHEMA,
    )


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    agents = await run_in_threadpool(_agents, _caller(ctx))
    return types.ListToolsResult(tools=[_tool(a) for a in agents])


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    caller = _caller(ctx)
    arguments = params.arguments or {}
    message = arguments.get("message")
    conversation_id = arguments.get("conversation_id")
    if not isinstance(message, str) or not message.strip():
        return _error("message: a non-empty string is required")
    if conversation_id is not None and not isinstance(conversation_id, str):
        return _error("conversation_id: a string")
    if caller.agents is not None and params.name not in caller.agents:
        return _error(f"agent {params.name} not found")
    try:
        started = await start_turn(caller.asker, params.name, message, conversation_id, "MCP")
    except WonderError as exc:
        return _error(f"{exc.code}: {exc.message}")
    said: list[AgentSaid] = []
    step = 0
    words = Reconciler()
    async for progress in follow_turn(caller.asker.context, started, ANSWER_TIMEOUT_S):
        note = _progress_note(progress, words)
        if isinstance(progress, AgentSaid):
            said.append(progress)
        if note:  # sent when the caller asked for progress (a progressToken), else nothing
            step += 1
            with contextlib.suppress(Exception):  # a client gone: the turn goes on regardless
                await ctx.session.report_progress(step, None, note)
        if isinstance(progress, TurnEnded):
            answer = answer_of(said, progress)
            structured = {
                "conversation_id": started.conversation.id,
                "turn_id": started.accepted.turn_id,
                "status": progress.status,
                "answer": answer.text,
            }
            if progress.status != "completed":
                failed = _error(f"the agent's turn failed: {progress.failure_reason}")
                failed.structured_content = structured
                return failed
            return types.CallToolResult(
                content=[types.TextContent(text=answer.text)], structured_content=structured
            )
    return _error("the turn did not end")


def _progress_note(progress: object, words: Reconciler) -> str | None:
    """What a progress notification says: the model's words as they come (what the stream
    missed of a message when it is stored), and the tools the agent calls."""
    match progress:
        case TokenDelta(text=text):
            return words.token(text) or None
        case AgentSaid(content=content):
            return words.said(content) or None
        case ToolMove(name=name, done=False):
            words.boundary()
            return f"[calling {name}]"
        case ToolMove(name=name, failed=True):
            return f"[{name} failed]"
        case _:
            return None


def _resources(caller: _Caller) -> list[types.Resource]:
    asker = caller.asker
    found = asker.context.store.conversations.list(
        asker.client_id, limit=MAX_RESOURCES, member=asker.user
    )
    return [
        types.Resource(
            uri=f"{RESOURCE_PREFIX}{c.id}",
            name=c.title or c.id,
            description=f"Conversation {c.id} with {c.agent_id or 'no agent'} ({c.status})",
            mime_type="application/json",
        )
        for c in found
    ]


async def _list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    resources = await run_in_threadpool(_resources, _caller(ctx))
    return types.ListResourcesResult(resources=resources)


async def _list_templates(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    template = types.ResourceTemplate(
        uri_template=f"{RESOURCE_PREFIX}{{conversation_id}}",
        name="conversation",
        description="A conversation's messages, in order (JSON)",
        mime_type="application/json",
    )
    return types.ListResourceTemplatesResult(resource_templates=[template])


def _conversation_json(caller: _Caller, uri: str) -> str:
    if not uri.startswith(RESOURCE_PREFIX):
        raise NotFound(f"resource {uri} not found")
    conversation_id = uri[len(RESOURCE_PREFIX) :]
    conversation = readable_conversation(caller.asker, conversation_id)
    messages = caller.asker.context.store.messages.list(conversation_id)[-MAX_MESSAGES:]
    body = {
        "conversation": conversation.model_dump(mode="json"),
        "messages": [
            {"role": m.role.value, "author": m.author, "content": m.content, "seq": m.seq}
            for m in messages
        ],
    }
    return json.dumps(body)


async def _read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    try:
        text = await run_in_threadpool(_conversation_json, _caller(ctx), uri)
    except NotFound:
        # The same answer for a conversation not there and one the caller may not read.
        raise MCPError(RESOURCE_NOT_FOUND, f"resource {uri} not found") from None
    contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
    return types.ReadResourceResult(contents=[contents])


def _server() -> Server[Any]:
    return Server(
        "wonder",
        version="0.1.0",
        instructions="Each tool is a Wonder agent: send it a message, get its answer.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_list_resource_templates=_list_templates,
        on_read_resource=_read_resource,
    )


class McpEndpoint:
    """The MCP server of one gateway replica, answering each request with a session manager of
    its own (stateless: a request is its whole MCP session), whose task group lives exactly as
    long as the request, on the request's own event loop."""

    def __init__(self) -> None:
        self.server = _server()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = StreamableHTTPSessionManager(app=self.server, stateless=True)
        async with manager.run():
            await manager.handle_request(scope, receive, send)


class _Exchange(Response):
    """A response that hands the request to the MCP endpoint (an ASGI app) as it is."""

    def __init__(self, endpoint: McpEndpoint, caller: _Caller) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.caller = caller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.endpoint.handle({**scope, SCOPE_KEY: self.caller}, receive, send)


def _endpoint(request: Request) -> McpEndpoint:
    state = request.app.state
    endpoint: McpEndpoint | None = getattr(state, "mcp_endpoint", None)
    if endpoint is None:
        endpoint = state.mcp_endpoint = McpEndpoint()
    return endpoint


AgentsQuery = Annotated[
    str | None,
    Query(
        max_length=2000,
        pattern=r"^[A-Za-z0-9_,-]*$",
        description="Expose only these agents (comma-separated ids); default: all of yours",
    ),
]


@router.api_route(
    "/mcp",
    # Stateless: no standalone GET stream and no session to DELETE (both answer 405).
    methods=["POST"],
    summary="Wonder as an MCP server (streamable HTTP): your agents as tools, your "
    "conversations as resources",
    response_class=Response,
)
async def mcp_endpoint(
    request: Request,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
    agents: AgentsQuery = None,
) -> Response:
    chosen = frozenset(a for a in agents.split(",") if a) if agents else None
    caller = _Caller(Asker(context, guard, client_id, user), chosen)
    return _Exchange(_endpoint(request), caller)
