"""Dispatching a validated tool call to its target, with the tool's retry policy.

Targets: ``task`` → the executor (``TaskRunner``); ``agent`` → ``delegate``: a child conversation
(a resumable sub-agent session) whose actor runs one isolated turn and returns its answer, or
``loop_in``: the agent joins this conversation; ``workflow`` → a WorkflowCoordinator run.
Infrastructure errors are retried per ``tool.retry`` and, when exhausted, come back as a failed
``ToolResult`` with ``retriable: true``; business errors come back at once. The conversation actor
and the async-operations runner both dispatch through this class, with the same ports.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

from sqlalchemy.exc import IntegrityError

from actors.conversation.domain import DispatchTool
from actors.conversation.log import create_child_conversation
from actors.conversation.ports import ToolPorts
from actors.conversation.tool_calls import MODE_ARGUMENT
from core import tracing
from core.domain import (
    Agent,
    AgentCaller,
    AsyncOperation,
    Conversation,
    Participant,
    PersonaRef,
    TaskDef,
    Tool,
    ToolError,
    ToolResult,
    TurnStatus,
)
from core.errors import (
    ErrorCode,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    RetryableError,
    WonderError,
)
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.llm.protocol import ToolCallRequested
from core.llm.recording import link_turn
from core.mcp import target_of as mcp_target
from core.model_calls import HookKind
from core.ports import AgentAnswer, InvocationMode, TaskContext, TaskOutcome, failed_outcome
from core.projects import child_workplace
from core.retry import RetryPolicy, with_retries
from core.store import Store
from core.workflows import ConversationParent

log = logging.getLogger("wonder.tools")

PERSONA_TARGET = "persona:"


class ToolDispatcher:
    """Runs tool calls (and hook tasks) for one conversation."""

    def __init__(self, ports: ToolPorts, conversation: Conversation) -> None:
        self.ports = ports
        self.conversation = conversation

    def task_context(
        self,
        turn_id: str | None,
        agent_id: str | None,
        hook: HookKind | None = None,
        hook_run_id: str | None = None,
    ) -> TaskContext:
        return TaskContext(
            client_id=self.conversation.client_id,
            conversation_id=self.conversation.id,
            agent_id=agent_id,
            turn_id=turn_id,
            settings_env=self.ports.settings_env,
            hook=hook,
            hook_run_id=hook_run_id,
        )

    async def run_task(
        self, task_id: str, task_input: JsonObject, context: TaskContext
    ) -> TaskOutcome:
        """Run a library task on the executor; raises ``RetryableError`` on infrastructure
        failure."""
        task = self.ports.store.tasks.get(task_id, client_id=context.client_id)
        return await self.ports.tasks.run(task, task_input, context)

    async def run_hook(
        self,
        task_id: str,
        payload: JsonObject,
        turn_id: str,
        agent_id: str,
        *,
        workflow: bool = False,
        task: TaskDef | None = None,
        hook: HookKind | None = None,
        hook_run_id: str | None = None,
    ) -> JsonObject:
        """Run a hook (a task, or a workflow run to its end); a business failure is an error
        here (hooks have no model to tell). ``task``: its definition when the caller has read
        it (with the agent's setup), else it is read here. ``hook``/``hook_run_id``: which of
        the turn's hook runs it is (its model calls are recorded as that run's)."""
        context = self.task_context(turn_id, agent_id, hook, hook_run_id)
        if workflow:
            parent = ConversationParent(
                conversation_id=self.conversation.id, turn_id=turn_id, agent_id=agent_id
            )
            outcome = await self.ports.workflows.run_to_end(task_id, payload, parent=parent)
        elif task is not None:
            outcome = await self.ports.tasks.run(task, payload, context)
        else:
            outcome = await self.run_task(task_id, payload, context)
        if not outcome.success:
            raise RetryableError(f"hook {task_id} failed: {outcome.error_message()}")
        result = outcome.result
        return result if isinstance(result, dict) else {"result": result}

    async def dispatch(self, turn_id: str, agent_id: str, decision: DispatchTool) -> ToolResult:
        """Run one validated tool call on its target with the tool's retry policy."""
        tool = decision.tool
        policy = RetryPolicy.exponential(
            tool.retry.max_attempts, tool.retry.backoff_ms, tool.retry.timeout_ms
        )
        call_id = decision.call.id
        try:
            outcome = await with_retries(
                policy, lambda: self._dispatch_once(turn_id, agent_id, decision)
            )
        except NonRetryableError as exc:
            return _failed(call_id, exc.code, exc.message, retriable=False)
        except WonderError as exc:
            log.warning("tool %s failed after retries: %s", tool.name, exc.message)
            return _failed(call_id, exc.code, exc.message, retriable=True)
        return outcome.for_call(call_id)

    async def _dispatch_once(
        self, turn_id: str, agent_id: str, decision: DispatchTool
    ) -> TaskOutcome:
        tool = decision.tool
        match tool.target_type:
            case "task":
                context = self.task_context(turn_id, agent_id)
                return await self.run_task(tool.target_id, decision.input, context)
            case "agent" if invocation_mode(decision) == "loop_in":
                return await self._loop_in(turn_id, agent_id, decision)
            case "agent":
                return await self._delegate(turn_id, agent_id, decision)
            case "workflow":
                # The run works for the calling agent: its tasks' model calls default to the
                # agent's model profile, their memory actions act on the agent's memory.
                parent = ConversationParent(
                    conversation_id=self.conversation.id, turn_id=turn_id, agent_id=agent_id
                )
                return await self.ports.workflows.run_to_end(
                    tool.target_id, decision.input, parent=parent
                )
            case "mcp":
                return await self._call_mcp(decision)

    async def _call_mcp(self, decision: DispatchTool) -> TaskOutcome:
        """A tool of one of the client's MCP servers (``core.mcp``): the registration as it is
        now (a server deleted since the tool was imported answers ``NOT_FOUND``)."""
        tool = decision.tool
        server_id, name = mcp_target(tool)
        client_id = self.conversation.client_id
        server = await asyncio.to_thread(self.ports.store.mcp_servers.find, client_id, server_id)
        if server is None:
            return failed_outcome(ErrorCode.NOT_FOUND, f"MCP server {server_id} is not registered")
        timeout_s = tool.retry.timeout_ms / 1000
        return await self.ports.mcp.call_tool(server, name, decision.input, timeout_s)

    async def _loop_in(self, turn_id: str, agent_id: str, decision: DispatchTool) -> TaskOutcome:
        """Loop in (seed 001): the target agent joins this conversation as a participant,
        answers the invitation here, in the shared conversation, then answers when addressed."""
        target = self._target_agent(decision)
        caller = AgentCaller(
            agent_id=agent_id, turn_id=turn_id, conversation_id=self.conversation.id
        )
        note = f"{target.name} now takes part in this conversation; address them as @{target.id}."
        invitation = _delegated_text(decision.input)
        if invitation in ("", "{}"):  # nothing to answer yet: join only
            await self.ports.conversations.add_participant(self.conversation.id, target.id)
            return TaskOutcome.ok({"agent_id": target.id, "joined": True, "note": note})
        answer = await self.ports.conversations.start_agent_call(
            self.conversation.id, invitation, caller, "loop_in", agent_id=target.id
        )
        link_turn(
            turn_id,
            "child_turn",
            answer.turn_id,
            self.conversation.id,
            mode="loop_in",
            agent_id=target.id,
            child_conversation_id=answer.conversation_id,
            status=answer.status.value,
        )
        if answer.declined:
            reason = f"agent {target.id} joined but declined: {answer.failure_reason}"
            return failed_outcome(ErrorCode.AGENT_DECLINED, reason)
        if answer.over_quota:
            return over_quota(target.id, answer)
        if answer.status is not TurnStatus.COMPLETED:
            reason = f"agent {target.id} joined but could not answer: {answer.failure_reason}"
            return failed_outcome(ErrorCode.EXECUTION_FAILED, reason, retriable=True)
        return TaskOutcome.ok(
            {"agent_id": target.id, "joined": True, "answer": answer.content, "note": note}
        )

    async def join_now(
        self, tool: Tool | None, operation: AsyncOperation, ack: ToolResult
    ) -> ToolResult | None:
        """For an async agent tool in loop_in mode: the target agent joins this conversation
        now (seed 001: the invited agent joins at once; only its answer comes later), and the
        model hears so with ``ack``. None for any other async tool, or when the agent is not
        available (the operation then fails as a sync call would, AGENT_DECLINED)."""
        if tool is None or tool.target_type != "agent":
            return None
        call = ToolCallRequested(id=operation.tool_call_id, name=tool.name, arguments="{}")
        decision = DispatchTool(call=call, tool=tool, input=operation.input)
        if invocation_mode(decision) != "loop_in":
            return None
        try:
            target = self._target_agent(decision)
        except NonRetryableError:
            return None
        await self.ports.conversations.add_participant(self.conversation.id, target.id)
        note = (
            f"{target.name} joined this conversation now; address them as @{target.id}. Their "
            "answer to the invitation runs in the background and will arrive later in this "
            "conversation."
        )
        result = {**(ack.result or {}), "agent_id": target.id, "joined": True, "note": note}
        return ack.model_copy(update={"result": result})

    def _target_agent(self, decision: DispatchTool) -> Agent:
        target = decision.tool.target_id
        client_id = self.conversation.client_id
        try:
            if target.startswith(PERSONA_TARGET):
                return persona_agent(self.ports.store, client_id, target[len(PERSONA_TARGET) :])
            return self.ports.store.agents.get(target, client_id)
        except NotFound:
            raise NonRetryableError(
                f"agent {decision.tool.target_id} is not available", code=ErrorCode.AGENT_DECLINED
            ) from None

    async def _delegate(self, turn_id: str, agent_id: str, decision: DispatchTool) -> TaskOutcome:
        """Delegate: one isolated turn of the target agent in a child conversation (a sub-agent
        session). With ``session_id`` in the input, the same child conversation is resumed."""
        parent = self.conversation
        depth_limit = self.ports.settings.max_delegation_depth
        if parent.depth + 1 > depth_limit:
            raise PermissionDenied(f"delegation depth limit {depth_limit} reached")
        target = self._target_agent(decision)
        message = _delegated_text(decision.input)
        caller = AgentCaller(agent_id=agent_id, turn_id=turn_id, conversation_id=parent.id)
        session_id = str(decision.input.get("session_id") or new_id("session"))
        label = f"subagent:{parent.id}:{target.id}:{session_id}"
        existing = self.ports.store.sessions.get(parent.client_id, label)
        conversations = self.ports.conversations
        answer: AgentAnswer
        if existing is not None:
            answer = await conversations.start_agent_call(existing, message, caller, "delegate")
        else:
            child_id = new_id("conv")
            workplace = await asyncio.to_thread(
                child_workplace, self.ports.store, parent, target, child_id
            )
            child_turn = self._create_child(
                turn_id, child_id, target.id, workplace, message, caller, label
            )
            answer = await conversations.run_agent_turn(child_id, child_turn)
        link_turn(
            turn_id,
            "child_turn",
            answer.turn_id,
            parent.id,
            mode="delegate",
            agent_id=target.id,
            child_conversation_id=answer.conversation_id,
            status=answer.status.value,
        )
        if answer.declined:
            reason = f"agent {target.id} declined: {answer.failure_reason}"
            return failed_outcome(ErrorCode.AGENT_DECLINED, reason)
        if answer.over_quota:
            return over_quota(target.id, answer)
        if answer.status is not TurnStatus.COMPLETED:
            # Seed 001: a delegate that failed (crashed, interrupted, its model down) may be asked
            # again; the calling model decides.
            reason = f"agent {target.id} failed: {answer.failure_reason}"
            return failed_outcome(ErrorCode.EXECUTION_FAILED, reason, retriable=True)
        return TaskOutcome.ok(
            {
                "agent_id": target.id,
                "session_id": session_id,
                "conversation_id": answer.conversation_id,
                "answer": answer.content,
            }
        )

    def _create_child(
        self,
        turn_id: str,
        child_id: str,
        target_id: str,
        workplace: tuple[str | None, str | None],
        message: str,
        caller: AgentCaller,
        label: str,
    ) -> str:
        """The child conversation (on ``workplace``: its project and branch) and its first
        message, turn and session label, in one commit; the turn's id."""
        parent = self.conversation
        store = self.ports.store
        turn_messages = store.messages.list(parent.id, turn_ids=[turn_id])
        # The parent's agents (not its users: they did not speak in the child), then the target.
        participants = [p for p in parent.participants if p.type == "agent" and p.id != target_id]
        return create_child_conversation(
            store,
            parent=parent,
            child_id=child_id,
            workplace=workplace,
            agent_id=target_id,
            participants=[*participants, Participant(type="agent", id=target_id)],
            title=f"delegated by {caller.agent_id}",
            started_by_message_id=turn_messages[0].id if turn_messages else None,
            content=message,
            caller=caller,
            session_label=label,
            at=utc_now(),
            user_id=store.turns.get(turn_id).user_id,  # the child's turn works for the same user
            trace=tracing.current(),  # the delegating span: the child's turn joins its trace
        )


def persona_agent(store: Store, client_id: str, persona_id: str) -> Agent:
    """The client's agent for a library persona, created on first use.

    A tool may target ``persona:<id>`` instead of an agent id, so that a library can ship a team
    (a manager delegating to an architect, a developer, a reviewer) without knowing the agent ids
    a client will have: each client gets one agent per such persona, with its own memory.
    """
    # NotFound unless the client's library or the system's has such a persona.
    store.personas.get(persona_id, client_id=client_id)
    agent_id = persona_agent_id(persona_id, client_id)
    try:
        return store.agents.get(agent_id, client_id)
    except NotFound:
        pass
    agent = Agent(
        id=agent_id,
        client_id=client_id,
        name=persona_id,
        persona_ref=PersonaRef(id=persona_id),
        created_at=utc_now(),
    )
    try:
        return store.agents.insert(agent)
    except IntegrityError:  # created concurrently by another conversation
        return store.agents.get(agent_id, client_id)


AGENT_ID_MAX = 64  # the store's agents.id column (PostgreSQL enforces it; SQLite does not)


def persona_agent_id(persona_id: str, client_id: str) -> str:
    """The client's agent for a persona: ``agent_<persona>_<client>`` when that fits the store's
    id column, else ``agent_p_`` and a digest of both (a persona id of 20+ characters)."""
    readable = f"agent_{persona_id}_{client_id}"
    if len(readable) <= AGENT_ID_MAX:
        return readable
    digest = hashlib.sha256(f"{persona_id}\0{client_id}".encode()).hexdigest()[:40]
    return f"agent_p_{digest}"


def over_quota(agent_id: str, answer: AgentAnswer) -> TaskOutcome:
    """A called agent's turn refused by a quota: the caller may ask again when it reopens."""
    reason = f"agent {agent_id} could not answer: {answer.failure_reason}"
    return failed_outcome(ErrorCode.QUOTA_EXCEEDED, reason, retriable=True)


def _failed(call_id: str, code: ErrorCode, message: str, *, retriable: bool) -> ToolResult:
    return ToolResult(
        tool_call_id=call_id,
        success=False,
        error=ToolError(code=code, message=message, retriable=retriable),
    )


def invocation_mode(decision: DispatchTool) -> InvocationMode:
    """How an agent tool is invoked: the call's ``mode`` argument when it gives one, else the
    tool's ``invocation_mode``."""
    match decision.input.get(MODE_ARGUMENT):
        case "delegate":
            return "delegate"
        case "loop_in":
            return "loop_in"
        case _:
            return decision.tool.invocation_mode


def _delegated_text(value: JsonObject) -> str:
    text = value.get("input") or value.get("message") or value.get("task")
    if isinstance(text, str):
        return text
    rest = {k: v for k, v in value.items() if k not in ("session_id", MODE_ARGUMENT)}
    return json.dumps(rest)
