"""Agent2Agent: each of a client's agents is an A2A agent (A2A 1.0 over JSON-RPC, the methods'
0.3 names too), for any A2A client (docs/protocols.md).

- ``GET /a2a/agents/{agent_id}/.well-known/agent-card.json``: the agent's card (its endpoint,
  streaming, a bearer API key as its security scheme).
- ``POST /a2a/agents/{agent_id}``: the JSON-RPC endpoint, served by the SDK's dispatcher
  (``a2a.server.routes.jsonrpc_dispatcher``) over ``WonderA2A``, a request handler that maps:
  ``SendMessage`` / ``message/send`` (one turn, answered when it ends; ``returnImmediately``:
  at once) and ``SendStreamingMessage`` / ``message/stream`` (the task, then the answer as
  artifact chunks and the status as it changes) onto ``agent_turns`` (the REST message path: no
  other writer of a conversation's log); ``GetTask``, ``ListTasks`` (one conversation's),
  ``CancelTask`` (the REST cancel) and ``SubscribeToTask`` onto the turns as stored and streamed.

A task is a turn (its id the turn's id) and its ``contextId`` the conversation: a message with a
``contextId`` continues that conversation, one without starts a new one. Same keys and rules as
the REST API: the key's client owns the agent (another client's is 404), an acting user
(``X-Wonder-User``) must be a member who may write to the conversation (post, cancel) or read it
(get, list, subscribe) — what the REST routes check, through ``member_access.check_reach``.
Not supported: push notifications, the extended card, files as message parts, more messages to a
task once its turn is over (continue with its ``contextId`` instead).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from core.domain import NAME_PATTERN, Conversation, Turn, TurnStatus
from core.errors import NotFound, WonderError
from core.ids import utc_now
from serving.gateway.a2a_protocol import (
    CANCEL_REASON,
    TERMINAL,
    UnsupportedPart,
    artifact_chunk,
    card_json,
    card_of,
    message_text,
    started_task,
    status_update,
    task_of,
)
from serving.gateway.agent_turns import (
    AgentSaid,
    Asker,
    Reconciler,
    StartedTurn,
    TokenDelta,
    ToolMove,
    TurnEnded,
    agent_of,
    follow_turn,
    readable_conversation,
    run_turn,
    start_turn,
)
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.member_access import check_reach
from serving.gateway.protocol import MessageAccepted

router = APIRouter(tags=["a2a"])

SCOPE_KEY = "wonder.a2a"
VERSION = "0.1.0"
ANSWER_TIMEOUT_S = 600.0
MAX_LISTED = 100
CANCEL_ROUTE = "/v1/conversations/{conversation_id}/turns/{turn_id}/cancel"
AgentPath = Annotated[str, Path(pattern=NAME_PATTERN, description="The agent's id")]


@dataclass(frozen=True, slots=True)
class _Caller:
    """What the HTTP request established: the asker (key's client, acting user) and the agent
    the endpoint is."""

    asker: Asker
    agent_id: str


def _caller(context: ServerCallContext) -> _Caller:
    caller = context.state.get(SCOPE_KEY)
    if not isinstance(caller, _Caller):
        raise InternalError("an A2A request without the gateway's authentication")
    return caller


def _refused(exc: WonderError, not_found: A2AError | None = None) -> NoReturn:
    """A Wonder error as the A2A error a client sees (the Wonder code in its details)."""
    data = {"wonder_code": str(exc.code), "retriable": str(exc.retriable).lower()}
    if isinstance(exc, NotFound) and not_found is not None:
        not_found.data = data
        raise not_found from None
    if exc.retriable:
        raise InternalError(exc.message, data) from None
    raise InvalidParamsError(exc.message, data) from None


# --------------------------------------------------------------------------- tasks as turns


def _turn_of(caller: _Caller, task_id: str) -> tuple[Turn, Conversation]:
    """The turn a task id names, if the caller may read it and it is this agent's (else
    ``NotFound``: the same answer for a task not there and one out of reach)."""
    asker = caller.asker
    missing = NotFound(f"task {task_id} not found")
    try:
        turn = asker.context.store.turns.get(task_id)
        conversation = readable_conversation(asker, turn.conversation_id)
    except NotFound:
        raise missing from None
    if turn.agent_id != caller.agent_id:
        raise missing
    return turn, conversation


def _task(caller: _Caller, task_id: str, history_length: int | None) -> Task:
    turn, _ = _turn_of(caller, task_id)
    messages = caller.asker.context.store.messages.list(turn.conversation_id)
    return task_of(turn, messages, history_length)


def _listed(caller: _Caller, params: ListTasksRequest) -> ListTasksResponse:
    if not params.context_id:
        raise InvalidParamsError("contextId: tasks are listed by conversation; give its id")
    if params.page_token:
        raise InvalidParamsError("pageToken: one page (the latest tasks) is all there is")
    asker = caller.asker
    try:
        readable_conversation(asker, params.context_id)
    except NotFound:
        raise InvalidParamsError(f"conversation {params.context_id} not found") from None
    turns = [
        t
        for t in asker.context.store.turns.list(params.context_id)
        if t.agent_id == caller.agent_id
    ]
    size = min(params.page_size or MAX_LISTED, MAX_LISTED)
    messages = asker.context.store.messages.list(params.context_id)
    history = params.history_length if params.HasField("history_length") else None
    tasks = [task_of(t, messages, history) for t in turns[-size:]]
    if params.status:
        tasks = [t for t in tasks if t.status.state == params.status]
    if not params.include_artifacts:
        for task in tasks:
            del task.artifacts[:]
    return ListTasksResponse(tasks=tasks, page_size=len(tasks), total_size=len(tasks))


def _cancellable(caller: _Caller, task_id: str) -> Turn:
    turn, _ = _turn_of(caller, task_id)
    asker = caller.asker
    if asker.user is not None:
        params = {"conversation_id": turn.conversation_id, "turn_id": turn.id}
        check_reach(asker.context, asker.client_id, asker.user, "POST", CANCEL_ROUTE, params)
    if turn.status != TurnStatus.ACTIVE:
        raise TaskNotCancelableError(f"task {task_id} is over ({turn.status})")
    return turn


def _first_seq(caller: _Caller, turn: Turn) -> int:
    """Where the turn's events start in its conversation's log (its message's place)."""
    if turn.reply_to_message_id is None:
        return 0
    try:
        return caller.asker.context.store.messages.get(turn.reply_to_message_id).seq
    except NotFound:
        return 0


# --------------------------------------------------------------------------- the handler


class WonderA2A(RequestHandler):
    """The A2A methods over Wonder's turns (module docstring)."""

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        caller = _caller(context)
        started = await _start(caller, params.message)
        if params.configuration.return_immediately:
            return started_task(
                started.accepted.turn_id, started.conversation.id, params.message, utc_now()
            )
        await run_turn(caller.asker.context, started, ANSWER_TIMEOUT_S)
        history = (
            params.configuration.history_length
            if params.configuration.HasField("history_length")
            else None
        )
        return await run_in_threadpool(_task, caller, started.accepted.turn_id, history)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        caller = _caller(context)
        started = await _start(caller, params.message)
        task_id, context_id = started.accepted.turn_id, started.conversation.id
        yield started_task(task_id, context_id, params.message, utc_now())
        async for event in _progress_events(caller, started):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        caller = _caller(context)
        history = params.history_length if params.HasField("history_length") else None
        try:
            return await run_in_threadpool(_task, caller, params.id, history)
        except WonderError as exc:
            _refused(exc, TaskNotFoundError(exc.message))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        caller = _caller(context)
        try:
            return await run_in_threadpool(_listed, caller, params)
        except WonderError as exc:
            _refused(exc)

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        caller = _caller(context)
        asker = caller.asker
        try:
            turn = await run_in_threadpool(_cancellable, caller, params.id)
            await asker.context.conversations.cancel_turn(
                turn.conversation_id, turn.id, CANCEL_REASON
            )
            return await run_in_threadpool(_task, caller, params.id, None)
        except WonderError as exc:
            _refused(exc, TaskNotFoundError(exc.message))

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        caller = _caller(context)
        try:
            turn, conversation = await run_in_threadpool(_turn_of, caller, params.id)
            after = await run_in_threadpool(_first_seq, caller, turn)
            messages = await run_in_threadpool(
                caller.asker.context.store.messages.list, turn.conversation_id
            )
        except WonderError as exc:
            _refused(exc, TaskNotFoundError(exc.message))
        task = task_of(turn, messages)
        if task.status.state in TERMINAL:
            raise UnsupportedOperationError(f"task {params.id} is over: read it with GetTask")
        yield task
        accepted = MessageAccepted(
            turn_id=turn.id, message_id=turn.reply_to_message_id or "", seq=after
        )
        async for event in _progress_events(caller, StartedTurn(conversation, accepted)):
            yield event

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


async def _start(caller: _Caller, message: Message) -> StartedTurn:
    """The message as a turn of the endpoint's agent (a new conversation unless it names one)."""
    if message.role == Role.ROLE_AGENT:
        raise InvalidParamsError("message.role: a message to an agent is the user's")
    if message.task_id:
        await _refuse_task_reference(caller, message.task_id)
    try:
        text = message_text(message)
    except UnsupportedPart as exc:
        raise ContentTypeNotSupportedError(str(exc)) from None
    except ValueError as exc:
        raise InvalidParamsError(f"message: {exc}") from None
    try:
        return await start_turn(
            caller.asker, caller.agent_id, text, message.context_id or None, "A2A"
        )
    except WonderError as exc:
        _refused(exc)


async def _refuse_task_reference(caller: _Caller, task_id: str) -> NoReturn:
    """A message to an existing task: a task is one turn and takes no more messages."""
    try:
        turn, _ = await run_in_threadpool(_turn_of, caller, task_id)
    except WonderError as exc:
        _refused(exc, TaskNotFoundError(exc.message))
    raise UnsupportedOperationError(
        f"task {task_id} is one turn and takes no further messages: send a new message with "
        f"contextId {turn.conversation_id} to continue its conversation"
    )


async def _progress_events(caller: _Caller, started: StartedTurn) -> AsyncIterator[Event]:
    """A turn's progress as A2A events: the answer as chunks of the ``answer`` artifact (the
    model's words as they come, what the stream missed when a message is stored), a status
    update for each tool the agent calls, and the final status."""
    task_id, context_id = started.accepted.turn_id, started.conversation.id
    words = Reconciler()
    sent = False
    async for progress in follow_turn(caller.asker.context, started, ANSWER_TIMEOUT_S):
        match progress:
            case TokenDelta(text=text) if text:
                yield artifact_chunk(task_id, context_id, words.token(text), sent, False)
                sent = True
            case AgentSaid(content=content):
                rest = words.said(content)
                if rest:
                    yield artifact_chunk(task_id, context_id, rest, sent, False)
                    sent = True
            case ToolMove(name=name, done=False):
                words.boundary()
                working = TaskState.TASK_STATE_WORKING
                yield status_update(task_id, context_id, working, utc_now(), f"calling {name}")
            case TurnEnded() as ended:
                if sent:
                    yield artifact_chunk(task_id, context_id, "", True, True)
                yield _ended(caller, task_id, context_id, ended)
                return


def _ended(caller: _Caller, task_id: str, context_id: str, ended: TurnEnded) -> Event:
    if ended.status == "completed":
        state = TaskState.TASK_STATE_COMPLETED
    elif ended.failure_reason == CANCEL_REASON:
        state = TaskState.TASK_STATE_CANCELED
    else:
        state = TaskState.TASK_STATE_FAILED
    return status_update(task_id, context_id, state, utc_now(), ended.failure_reason)


# --------------------------------------------------------------------------- routes


class _CallContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with what the gateway authenticated."""

    def build(self, request: Any) -> ServerCallContext:
        built = super().build(request)
        built.state[SCOPE_KEY] = request.scope.get(SCOPE_KEY)
        return built


def _dispatcher(request: Request) -> JsonRpcDispatcher:
    state = request.app.state
    dispatcher: JsonRpcDispatcher | None = getattr(state, "a2a_dispatcher", None)
    if dispatcher is None:
        dispatcher = state.a2a_dispatcher = JsonRpcDispatcher(
            WonderA2A(), _CallContextBuilder(), enable_v0_3_compat=True
        )
    return dispatcher


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


@router.get(
    "/a2a/agents/{agent_id}/.well-known/agent-card.json",
    summary="An agent's A2A agent card (its endpoint, capabilities and authentication)",
    response_class=JSONResponse,
)
async def agent_card(
    agent_id: AgentPath, request: Request, context: Context, client_id: ClientId
) -> JSONResponse:
    agent = await run_in_threadpool(context.store.agents.get, agent_id, client_id)
    return JSONResponse(card_json(card_of(agent, _base_url(request), VERSION)))


@router.post(
    "/a2a/agents/{agent_id}",
    summary="An agent's A2A endpoint (JSON-RPC: SendMessage, SendStreamingMessage, GetTask, "
    "ListTasks, CancelTask, SubscribeToTask; their 0.3 names too)",
    response_class=Response,
)
async def agent_rpc(
    agent_id: AgentPath,
    request: Request,
    context: Context,
    client_id: ClientId,
    guard: Guard,
    user: User,
) -> Response:
    asker = Asker(context, guard, client_id, user)
    try:
        await run_in_threadpool(agent_of, asker, agent_id)
    except NotFound:
        raise NotFound(f"agent {agent_id} not found") from None
    request.scope[SCOPE_KEY] = _Caller(asker, agent_id)
    return await _dispatcher(request).handle_requests(request)
