"""The async operations runner: runs async tool calls so that they outlive their conversation actor.

A Conversation records an operation (``pending``) before handing it here, acknowledges the call to
its model at once, and may then be evicted or crash. This actor (``async-operations``, named and
detached by ``cluster``) runs the operation on its target (task, workflow or agent, with the tool's
retry policy, through the same ``ToolDispatcher`` as the conversation), stores the result
(``completed``) and delivers it to the conversation, re-activating it if needed. The conversation
answers with it and marks it ``delivered`` in the same transaction as its follow-up message, so each
operation is answered exactly once. A delivery that exhausts its retries is not dropped silently:
the operation records why, the conversation gets an ``operation.delivery_failed`` event, and the
result stays ``completed`` so the conversation's next activation delivers it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from sqlalchemy import Connection

from actors.conversation.domain import DispatchTool
from actors.conversation.log import ConversationLog, LogOwned, PendingEvent, PendingWrite
from actors.conversation.ports import ToolPorts
from actors.conversation.tool_dispatch import ToolDispatcher
from core.domain import AsyncOperation, Event, OperationStatus, ToolError, ToolResult
from core.errors import ErrorCode, WonderError
from core.ids import utc_now
from core.llm.protocol import ToolCallRequested
from core.retry import DELIVERY, with_retries

log = logging.getLogger("wonder.async_operations")


class AsyncOperationRunner:
    """Plain Python; ``cluster`` makes it the named detached actor ``async-operations``."""

    def __init__(self, ports: Callable[[], ToolPorts]) -> None:
        self.ports = ports()
        self.store = self.ports.store
        self._running: dict[str, asyncio.Task[None]] = {}

    async def start(self, op_id: str, agent_id: str) -> bool:
        """Start running ``op_id`` (idempotent); returns at once."""
        if op_id in self._running:
            return False
        task = asyncio.get_running_loop().create_task(self._run(op_id, agent_id))
        self._running[op_id] = task
        task.add_done_callback(lambda _t: self._running.pop(op_id, None))
        return True

    async def running(self) -> frozenset[str]:
        return frozenset(self._running)

    async def cancel(self, op_id: str) -> bool:
        task = self._running.get(op_id)
        if task is None:
            return False
        task.cancel()
        return True

    async def _run(self, op_id: str, agent_id: str) -> None:
        op = self.store.async_operations.get(op_id)
        if op.status is not OperationStatus.PENDING:
            return  # finished (or cancelled) already: a repeated start
        if op.started_at is None:  # from here on its tool may run: a recovery must not re-run it
            op = op.model_copy(update={"started_at": utc_now()})
            self.store.async_operations.save(op)
        try:
            result = await self._execute(op, agent_id)
        except Exception as exc:  # any failure still reaches the model and the user
            log.exception("async operation %s failed", op_id)
            error = ToolError(code=ErrorCode.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}")
            result = ToolResult(tool_call_id=op.tool_call_id, success=False, error=error)
        op = self.store.async_operations.get(op_id)
        if op.status is not OperationStatus.PENDING:
            return  # cancelled meanwhile
        completed = op.model_copy(
            update={
                "status": OperationStatus.COMPLETED,
                "result": result,
                "completed_at": utc_now(),
            }
        )
        self.store.async_operations.save(completed)
        await self._deliver(completed)

    async def _execute(self, op: AsyncOperation, agent_id: str) -> ToolResult:
        conversation = self.store.conversations.get(op.conversation_id)
        tool = self.store.tools.get(op.tool_id, client_id=conversation.client_id)
        call = ToolCallRequested(
            id=op.tool_call_id, name=op.tool_name, arguments=json.dumps(op.input)
        )
        decision = DispatchTool(call=call, tool=tool, input=op.input)
        return await ToolDispatcher(self.ports, conversation).dispatch(
            op.turn_id, agent_id, decision
        )

    async def _deliver(self, op: AsyncOperation) -> None:
        """Hand a completed operation to its conversation (re-activating it), with retries."""
        conversations = self.ports.conversations
        try:
            await with_retries(
                DELIVERY, lambda: conversations.deliver_operation(op.conversation_id, op.id)
            )
        except WonderError as exc:
            self._delivery_failed(op, exc.message)

    def _delivery_failed(self, op: AsyncOperation, reason: str) -> None:
        """Record why the result did not reach its conversation: on the operation, and in the
        conversation's log as a writer without the actor (while an actor holds the log, it
        delivers the result itself when it gets to it: the operation alone records it)."""
        log.error("operation %s not delivered to %s: %s", op.id, op.conversation_id, reason)
        try:
            recorded = op.model_copy(update={"delivery_error": reason[:1000]})
            payload = {"turn_id": op.turn_id, "operation_id": op.id, "error": reason[:1000]}

            def write(conn: Connection, _events: list[Event]) -> None:
                self.store.async_operations.save(recorded, conn)

            event = PendingEvent("operation.delivery_failed", payload)
            listeners = self.ports.listeners
            conversation_log = ConversationLog(
                self.store,
                op.conversation_id,
                lambda frame: listeners.publish(op.conversation_id, [frame]),
            )
            try:
                conversation_log.commit(utc_now(), [PendingWrite([event], write)])
            except LogOwned:
                self.store.async_operations.save(recorded)
        except Exception:  # the conversation may be gone (deleted); the log line above stays
            log.exception("could not record the failed delivery of %s", op.id)
