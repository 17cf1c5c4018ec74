"""The async operations runner: runs async tool calls so that they outlive their conversation actor.

The factory that makes it a named detached actor is ``cluster.actors.operations_runner``.
A Conversation records an operation (``pending``) before handing it here, acknowledges the call to
its model at once, and may then be evicted or crash. This named detached actor
(``async-operations``) runs the operation on its target (task, workflow or agent, with the tool's
retry policy), stores the result (``completed``) and delivers it to the conversation, re-activating
it if needed. The conversation answers with it and marks it ``delivered`` in the same transaction
as its follow-up message, so each operation is answered exactly once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from actors.conversation.domain import DispatchTool
from actors.conversation.tool_dispatch import ToolDispatcher
from actors.stores import open_store, settings_from_env
from cluster.config import Settings
from core.domain import Conversation, OperationStatus, ToolError, ToolResult
from core.errors import ErrorCode
from core.ids import utc_now
from core.llm.protocol import ToolCallRequested
from core.store import Store

log = logging.getLogger("wonder.operations")

RUNNER_NAME = "async-operations"
DELIVERY_ATTEMPTS = 10


@dataclass
class ConversationView:
    """What a ToolDispatcher needs of a conversation, outside its actor."""

    id: str
    conversation: Conversation
    store: Store
    env: dict[str, str]
    settings: Settings


class AsyncOperationRunner:
    """Plain Python; ``cluster.actors.operations_runner`` makes it the named detached actor."""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Task[None]] = {}

    async def start(self, op_id: str, agent_id: str, settings_env: dict[str, str]) -> bool:
        """Start running ``op_id`` (idempotent); returns at once."""
        if op_id in self._running:
            return False
        task = asyncio.get_running_loop().create_task(self._run(op_id, agent_id, settings_env))
        self._running[op_id] = task
        task.add_done_callback(lambda _t: self._running.pop(op_id, None))
        return True

    async def running(self) -> list[str]:
        return sorted(self._running)

    async def cancel(self, op_id: str) -> bool:
        task = self._running.get(op_id)
        if task is None:
            return False
        task.cancel()
        return True

    async def _run(self, op_id: str, agent_id: str, env: dict[str, str]) -> None:
        store = open_store(env)
        op = store.operations.get(op_id)
        try:
            result = await self._execute(store, env, op.conversation_id, op_id, agent_id)
        except Exception as exc:  # any failure still reaches the model and the user
            log.exception("async operation %s failed", op_id)
            result = ToolResult(
                tool_call_id=op.tool_call_id,
                success=False,
                error=ToolError(
                    code=ErrorCode.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}"
                ),
            )
        op = store.operations.get(op_id)
        if op.status is not OperationStatus.PENDING:
            return  # cancelled meanwhile
        store.operations.save(
            op.model_copy(
                update={
                    "status": OperationStatus.COMPLETED,
                    "result": result,
                    "completed_at": utc_now(),
                }
            )
        )
        await deliver(op.conversation_id, op_id)

    async def _execute(
        self, store: Store, env: dict[str, str], conversation_id: str, op_id: str, agent_id: str
    ) -> ToolResult:
        op = store.operations.get(op_id)
        view = ConversationView(
            id=conversation_id,
            conversation=store.conversations.get(conversation_id),
            store=store,
            env=env,
            settings=settings_from_env(env),
        )
        tool = store.tools.get(op.tool_id)
        call = ToolCallRequested(
            id=op.tool_call_id, name=op.tool_name, arguments=json.dumps(op.input)
        )
        decision = DispatchTool(call=call, tool=tool, input=op.input)
        return await ToolDispatcher(view).dispatch(op.turn_id, agent_id, decision)


async def deliver(conversation_id: str, op_id: str) -> None:
    """Hand a completed operation to its conversation (re-activating it), retrying on failure."""
    from cluster.actors import deliver_operation

    for attempt in range(DELIVERY_ATTEMPTS):
        try:
            await deliver_operation(conversation_id, op_id)
            return
        except Exception:  # the conversation may be restarting; it also re-delivers on start
            log.warning(
                "delivery of %s to %s failed (attempt %d)",
                op_id,
                conversation_id,
                attempt + 1,
                exc_info=True,
            )
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))


async def start_operation(op_id: str, agent_id: str, settings_env: dict[str, str]) -> None:
    from cluster.actors import operations_runner

    await operations_runner().start.remote(op_id, agent_id, settings_env)


async def running_operations() -> list[str]:
    from cluster.actors import operations_runner

    ops: list[str] = await operations_runner().running.remote()
    return ops
