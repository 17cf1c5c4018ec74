"""Dispatching a validated tool call to its target, with the tool's retry policy.

Targets: ``task`` → the executor (a Ray remote function); ``agent`` (delegate) → a new child
conversation whose actor runs one turn and returns its answer; ``workflow`` → a WorkflowCoordinator
run. Infrastructure errors are retried per ``tool.retry`` and, when exhausted, come back as a failed
``ToolResult`` with ``retriable: true``; business errors come back at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import ray

from actors.actions import ActionContext
from actors.conversation.domain import DispatchTool
from actors.executor import execute_task
from core.domain import Conversation, Participant, ToolError, ToolResult
from core.errors import (
    ErrorCode,
    NonRetryableError,
    NotFound,
    PermissionDenied,
    RetryableError,
    WonderError,
)
from core.retry import RetryPolicy, with_retries

if TYPE_CHECKING:
    from actors.conversation.actor import AgentSetup, ConversationActor

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

    async def dispatch(self, turn_id: str, setup: AgentSetup, decision: DispatchTool) -> ToolResult:
        tool = decision.tool
        policy = RetryPolicy.exponential(
            tool.retry.max_attempts, tool.retry.backoff_ms, tool.retry.timeout_ms
        )
        call_id = decision.call.id
        try:
            outcome = await with_retries(
                policy, lambda: self._dispatch_once(turn_id, setup, decision)
            )
        except NonRetryableError as exc:
            return _failed(call_id, exc.code, exc.message, retriable=False)
        except WonderError as exc:
            log.warning("tool %s failed after retries: %s", tool.name, exc.message)
            return _failed(call_id, exc.code, exc.message, retriable=True)
        if outcome.get("success"):
            return ToolResult(tool_call_id=call_id, success=True, result=outcome.get("result"))
        error = outcome.get("error") or {}
        code = error.get("code", ErrorCode.EXECUTION_FAILED)
        return _failed(
            call_id,
            ErrorCode(code),
            str(error.get("message", "tool failed")),
            retriable=bool(error.get("retriable", False)),
        )

    async def _dispatch_once(
        self, turn_id: str, setup: AgentSetup, decision: DispatchTool
    ) -> JsonObject:
        tool = decision.tool
        if tool.target_type == "task":
            return await self.run_task(
                tool.target_id, decision.input, self._context(turn_id, setup.agent.id)
            )
        if tool.target_type == "agent":
            return await self._delegate(turn_id, setup, decision)
        return await self._run_workflow(turn_id, setup, decision)

    async def _run_workflow(
        self, turn_id: str, setup: AgentSetup, decision: DispatchTool
    ) -> JsonObject:
        try:
            from cluster.workflows import run_workflow_to_end
        except ImportError:
            raise NotFound("workflow targets are not available in this build") from None
        return await run_workflow_to_end(
            decision.tool.target_id,
            decision.input,
            parent={"conversation_id": self.actor.id, "turn_id": turn_id},
        )

    async def _delegate(
        self, turn_id: str, setup: AgentSetup, decision: DispatchTool
    ) -> JsonObject:
        """Delegate: a one-shot turn of the target agent in a new child conversation."""
        from cluster.actors import start_agent_call

        parent = self.actor.conversation
        depth_limit = self.actor.settings.max_delegation_depth
        if parent.depth + 1 > depth_limit:
            raise PermissionDenied(f"delegation depth limit {depth_limit} reached")
        if decision.tool.invocation_mode != "delegate":
            raise NotFound("loop_in invocation is not available in this build")
        target = self.actor.store.agents.get(decision.tool.target_id, parent.client_id)
        child = self._create_child(turn_id, setup, target.id)
        text = decision.input.get("input") or decision.input.get("message")
        message = text if isinstance(text, str) else _as_text(decision.input)
        caller = {
            "type": "agent",
            "agent_id": setup.agent.id,
            "turn_id": turn_id,
            "conversation_id": parent.id,
        }
        answer = await start_agent_call(child.id, message, caller, "delegate")
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
                "conversation_id": child.id,
                "answer": answer["content"],
            },
        }

    def _create_child(self, turn_id: str, setup: AgentSetup, agent_id: str) -> Conversation:
        from core.conversations import create_conversation

        parent = self.actor.conversation
        turn_messages = self.actor.store.messages.list(parent.id, turn_ids=[turn_id])
        participants = [
            *parent.participants,
            *(
                []
                if any(p.id == agent_id for p in parent.participants)
                else [Participant(type="agent", id=agent_id)]
            ),
        ]
        return create_conversation(
            self.actor.store,
            client_id=parent.client_id,
            agent_id=agent_id,
            participants=participants,
            title=f"delegated by {setup.agent.id}",
            started_by_conversation_id=parent.id,
            started_by_message_id=turn_messages[0].id if turn_messages else None,
            depth=parent.depth + 1,
        )


def _failed(call_id: str, code: ErrorCode, message: str, *, retriable: bool) -> ToolResult:
    return ToolResult(
        tool_call_id=call_id,
        success=False,
        error=ToolError(code=code, message=message, retriable=retriable),
    )


def _as_text(value: JsonObject) -> str:
    import json

    return json.dumps(value)
