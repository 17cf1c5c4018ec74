"""Dispatching a validated tool call to its target, with the tool's retry policy.

Targets: ``task`` → the executor (a Ray remote function); ``agent`` → ``delegate``: a child
conversation (a resumable sub-agent session) whose actor runs one isolated turn and returns its
answer, or ``loop_in``: the agent joins this conversation; ``workflow`` → a WorkflowCoordinator
run. Infrastructure errors are retried per ``tool.retry`` and, when exhausted, come back as a failed
``ToolResult`` with ``retriable: true``; business errors come back at once.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import ray
from sqlalchemy.exc import IntegrityError

from actors.actions import ActionContext
from actors.conversation.domain import DispatchTool
from actors.executor import execute_task
from core.domain import Agent, AgentCaller, Participant, PersonaRef, ToolError, ToolResult
from core.errors import (
    ErrorCode,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    RetryableError,
    WonderError,
)
from core.ids import new_id, utc_now
from core.retry import RetryPolicy, with_retries
from core.store import Store

if TYPE_CHECKING:
    from actors.conversation.actor import ConversationActor

log = logging.getLogger("wonder.tools")

JsonObject = dict[str, Any]


class ToolDispatcher:
    def __init__(self, actor: ConversationActor) -> None:
        self.actor = actor

    def _context(self, turn_id: str | None, agent_id: str | None) -> ActionContext:
        return ActionContext(
            client_id=self.actor.conversation.client_id,
            conversation_id=self.actor.id,
            agent_id=agent_id,
            turn_id=turn_id,
            settings_env=self.actor.env,
        )

    async def run_task(
        self, task_id: str, task_input: JsonObject, ctx: ActionContext
    ) -> JsonObject:
        """Run a library task on the executor; raises on infrastructure failure."""
        task = self.actor.store.tasks.get(task_id)
        try:
            return await execute_task.remote(task.model_dump_json(), task_input, ctx)  # type: ignore[no-any-return]
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else exc
            if isinstance(cause, NonRetryableError):
                raise cause from exc
            raise RetryableError(f"task {task_id} failed: {cause}") from exc
        except ray.exceptions.RayError as exc:
            raise RetryableError(f"task {task_id} could not run: {exc}") from exc

    async def run_hook(self, task_id: str, payload: JsonObject) -> JsonObject:
        """Run a hook task; a business failure is an error here (hooks have no model to tell)."""
        ctx = self._context(payload.get("turn_id"), payload.get("agent_id"))
        outcome = await self.run_task(task_id, payload, ctx)
        if not outcome.get("success"):
            error = outcome.get("error") or {}
            raise RetryableError(f"hook {task_id} failed: {error.get('message', error)}")
        result = outcome.get("result")
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
        if outcome.get("success"):
            return ToolResult(tool_call_id=call_id, success=True, result=outcome.get("result"))
        error = outcome.get("error") or {}
        return _failed(
            call_id,
            ErrorCode(error.get("code", ErrorCode.EXECUTION_FAILED)),
            str(error.get("message", "tool failed")),
            retriable=bool(error.get("retriable", False)),
        )

    async def _dispatch_once(
        self, turn_id: str, agent_id: str, decision: DispatchTool
    ) -> JsonObject:
        tool = decision.tool
        if tool.target_type == "task":
            return await self.run_task(
                tool.target_id, decision.input, self._context(turn_id, agent_id)
            )
        if tool.target_type == "agent":
            if tool.invocation_mode == "loop_in":
                return await self._loop_in(decision)
            return await self._delegate(turn_id, agent_id, decision)
        return await self._run_workflow(turn_id, decision)

    async def _run_workflow(self, turn_id: str, decision: DispatchTool) -> JsonObject:
        from cluster.workflows import run_workflow_to_end

        return await run_workflow_to_end(
            decision.tool.target_id,
            decision.input,
            parent={"conversation_id": self.actor.id, "turn_id": turn_id},
        )

    async def _loop_in(self, decision: DispatchTool) -> JsonObject:
        """Loop in: the target agent joins this conversation and answers when addressed."""
        from cluster.actors import add_participant

        target = self._target_agent(decision)
        await add_participant(self.actor.id, target.id)
        return {
            "success": True,
            "result": {
                "agent_id": target.id,
                "joined": True,
                "note": f"{target.name} now sees this conversation; address them as @{target.id}.",
            },
        }

    def _target_agent(self, decision: DispatchTool) -> Agent:
        target = decision.tool.target_id
        client_id = self.actor.conversation.client_id
        try:
            if target.startswith(PERSONA_TARGET):
                return persona_agent(self.actor.store, client_id, target[len(PERSONA_TARGET) :])
            return self.actor.store.agents.get(target, client_id)
        except NotFound:
            raise NonRetryableError(
                f"agent {decision.tool.target_id} is not available", code=ErrorCode.AGENT_DECLINED
            ) from None

    async def _delegate(self, turn_id: str, agent_id: str, decision: DispatchTool) -> JsonObject:
        """Delegate: one isolated turn of the target agent in a child conversation (a sub-agent
        session). With ``session_id`` in the input, the same child conversation is resumed."""
        from cluster.actors import run_agent_turn, start_agent_call

        parent = self.actor.conversation
        depth_limit = self.actor.settings.max_delegation_depth
        if parent.depth + 1 > depth_limit:
            raise PermissionDenied(f"delegation depth limit {depth_limit} reached")
        target = self._target_agent(decision)
        message = _delegated_text(decision.input)
        caller = {
            "type": "agent",
            "agent_id": agent_id,
            "turn_id": turn_id,
            "conversation_id": parent.id,
        }
        session_id = str(decision.input.get("session_id") or new_id("session"))
        label = f"subagent:{parent.id}:{target.id}:{session_id}"
        existing = self.actor.store.sessions.get(parent.client_id, label)
        if existing is not None:
            answer = await start_agent_call(existing, message, caller, "delegate")
        else:
            child_id, child_turn = self._create_child(
                turn_id, agent_id, target.id, message, caller, label
            )
            answer = await run_agent_turn(child_id, child_turn)
        if answer["status"] != "completed":
            return {
                "success": False,
                "error": {
                    "code": ErrorCode.EXECUTION_FAILED,
                    "message": f"agent {target.id} failed: {answer.get('failure_reason')}",
                    "retriable": False,
                },
            }
        return {
            "success": True,
            "result": {
                "agent_id": target.id,
                "session_id": session_id,
                "conversation_id": answer["conversation_id"],
                "answer": answer["content"],
            },
        }

    def _create_child(
        self,
        turn_id: str,
        agent_id: str,
        target_id: str,
        message: str,
        caller: JsonObject,
        label: str,
    ) -> tuple[str, str]:
        """The child conversation and its first message, turn and session label, in one commit."""
        from actors.conversation.operations import create_child_conversation

        parent = self.actor.conversation
        turn_messages = self.actor.store.messages.list(parent.id, turn_ids=[turn_id])
        participants = [p for p in parent.participants if p.id != target_id]
        return create_child_conversation(
            self.actor.store,
            parent=parent,
            agent_id=target_id,
            participants=[*participants, Participant(type="agent", id=target_id)],
            title=f"delegated by {agent_id}",
            started_by_message_id=turn_messages[0].id if turn_messages else None,
            content=message,
            caller=AgentCaller.model_validate(caller),
            session_label=label,
        )


PERSONA_TARGET = "persona:"


def persona_agent(store: Store, client_id: str, persona_id: str) -> Agent:
    """The client's agent for a library persona, created on first use.

    A tool may target ``persona:<id>`` instead of an agent id, so that a library can ship a team
    (a manager delegating to an architect, a developer, a reviewer) without knowing the agent ids
    a client will have: each client gets one agent per such persona, with its own memory.
    """
    store.personas.get(persona_id)  # NotFound if the library has no such persona
    agent_id = f"agent_{persona_id}_{client_id}"
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


def _failed(call_id: str, code: ErrorCode, message: str, *, retriable: bool) -> ToolResult:
    return ToolResult(
        tool_call_id=call_id,
        success=False,
        error=ToolError(code=code, message=message, retriable=retriable),
    )


def _delegated_text(value: JsonObject) -> str:
    text = value.get("input") or value.get("message") or value.get("task")
    if isinstance(text, str):
        return text
    rest = {k: v for k, v in value.items() if k not in ("session_id",)}
    return json.dumps(rest)
