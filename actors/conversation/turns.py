"""Running turns: the effectful loop around ``planning`` for one Conversation actor.

A turn: context assembly (a hook task, or the built-in default) → model call (streamed) → tools →
... → agent message → memory extraction → completed. Async tools are recorded as operations, run by
the ``async-operations`` runner and acknowledged at once; the turn then waits
(``awaiting_operations``) and each completion comes back through ``follow_up``: one more model
call with the result and one more agent message on the same turn, exactly once per operation.
Each step's outcome is fed back to ``planning``, which decides the next one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors.conversation import planning
from actors.conversation.domain import (
    AppendAgentMessage,
    AwaitOperations,
    CallModel,
    CompleteTurn,
    DispatchTool,
    FailTurn,
    ModelAnswered,
    ReturnToolError,
    ToolCatalog,
    ToolsReturned,
    TurnProgress,
)
from actors.conversation.operations import PendingEvent
from core.domain import (
    Agent,
    AsyncOperation,
    Message,
    MessageRole,
    ModelProfile,
    Move,
    OperationStatus,
    Persona,
    ToolCallRecord,
    ToolError,
    ToolResult,
    Turn,
    TurnStatus,
    Usage,
)
from core.errors import ErrorCode, NotFound, WonderError
from core.ids import new_id, utc_now
from core.llm.protocol import ChatModel, ChatRequest, ModelFinished, TextDelta, ToolCallRequested
from core.retry import CONTEXT_ASSEMBLY, LLM_CALL, MEMORY_EXTRACTION, with_retries

if TYPE_CHECKING:
    from actors.conversation.actor import ConversationActor

log = logging.getLogger("wonder.turns")

JsonObject = dict[str, Any]
WAITING = (OperationStatus.PENDING, OperationStatus.COMPLETED)


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What a turn needs to know about its agent, loaded once per model loop."""

    agent: Agent
    persona: Persona
    profile: ModelProfile
    catalog: ToolCatalog


class TurnRunner:
    def __init__(self, actor: ConversationActor) -> None:
        self.actor = actor
        self.store = actor.store
        self.log = actor.log
        self.inflight: dict[str, list[ToolCallRequested]] = {}
        self.cancel_reasons: dict[str, str] = {}
        self._turn_locks: dict[str, asyncio.Lock] = {}

    def lock(self, turn_id: str) -> asyncio.Lock:
        return self._turn_locks.setdefault(turn_id, asyncio.Lock())

    # ------------------------------------------------------------------ entry points

    async def run(self, turn: Turn) -> None:
        """Run a new turn from its input to its answer (and completion, unless awaiting)."""
        async with self.lock(turn.id):
            await self._guarded(turn.id, self._run, turn)

    async def follow_up(self, op_id: str) -> None:
        """Answer with a completed async operation's result, once."""
        op = self.store.operations.get(op_id)
        async with self.lock(op.turn_id):
            op = self.store.operations.get(op_id)
            if op.status is not OperationStatus.COMPLETED:
                return  # delivered already, cancelled, or still running
            turn = self.store.turns.get(op.turn_id)
            if turn.status is not TurnStatus.ACTIVE:
                self.store.operations.save(
                    op.model_copy(update={"status": OperationStatus.CANCELLED})
                )
                return
            await self._guarded(turn.id, self._follow_up, turn, op)

    async def _guarded(self, turn_id: str, step: Any, *args: Any) -> None:
        try:
            await step(*args)
        except asyncio.CancelledError:
            reason = self.cancel_reasons.pop(turn_id, "cancelled")
            self.close_dangling(turn_id, f"the turn was cancelled: {reason}")
            self.fail(turn_id, reason)
        except WonderError as exc:
            log.warning("turn %s failed: %s", turn_id, exc.message)
            self.fail(turn_id, exc.message)
        except Exception as exc:  # the loop must never leave a turn dangling
            log.exception("turn %s crashed", turn_id)
            self.fail(turn_id, f"internal error: {type(exc).__name__}: {exc}")

    async def _run(self, turn: Turn) -> None:
        setup = self.load_setup(turn)
        base = await self._assemble_context(turn, setup)
        if base is not None:
            await self._loop(turn.id, setup, base, ())

    async def _follow_up(self, turn: Turn, op: AsyncOperation) -> None:
        setup = self.load_setup(turn)
        base = await self._assemble_context(turn, setup)
        if base is None:
            return
        assert op.result is not None
        note = planning.operation_result_message(op.tool_name, op.id, op.result)
        await self._loop(turn.id, setup, base, (note,), delivering=op)

    # ------------------------------------------------------------------ setup and context

    def load_setup(self, turn: Turn) -> AgentSetup:
        agent_id = turn.agent_id or self.actor.conversation.agent_id
        if agent_id is None:
            raise NotFound("this conversation has no agent to answer")
        return self.load_setup_for(agent_id)

    def load_setup_for(self, agent_id: str) -> AgentSetup:
        agent = self.store.agents.get(agent_id)
        if agent.persona is not None:
            persona = agent.persona
        elif agent.persona_ref is not None:
            persona = self.store.personas.get(agent.persona_ref.id, agent.persona_ref.version)
        else:
            raise NotFound(f"agent {agent.id} has no persona")
        profile = self.store.model_profiles.get(persona.model_profile_id)
        tools = [self.store.tools.get(tool_id) for tool_id in persona.tool_ids]
        return AgentSetup(agent, persona, profile, planning.build_catalog(persona, tools))

    def pending_operations(self) -> list[AsyncOperation]:
        return self.store.operations.list(self.actor.id, statuses=WAITING)

    async def _assemble_context(self, turn: Turn, setup: AgentSetup) -> ChatRequest | None:
        history = self._recent_history(turn, setup.persona.recent_turns_limit)
        pending = self.pending_operations()
        system_context = planning.pending_operations_note(pending)
        hook = setup.persona.context_assembly_workflow_id
        if hook:
            payload = self._hook_input(turn, setup, history, pending)
            try:
                result = await with_retries(
                    CONTEXT_ASSEMBLY, lambda: self.actor.tools.run_hook(hook, payload)
                )
            except WonderError as exc:
                self.log.note(
                    utc_now(),
                    "context_assembly.failed",
                    {"turn_id": turn.id, "error": exc.to_dict()},
                )
                self.fail(turn.id, f"context assembly failed: {exc.message}", context_failed=True)
                return None
            extra = str((result or {}).get("system_context") or "")
            system_context = "\n\n".join(part for part in (extra, system_context) if part)
        return planning.assemble_context(
            setup.persona, setup.profile, history, setup.catalog, setup.agent.id, system_context
        )

    def _recent_history(self, turn: Turn, limit: int) -> list[Message]:
        turn_ids = [t.id for t in self.store.turns.list(self.actor.id, last=limit + 1)]
        wanted = planning.recent_turn_ids(turn_ids, turn.id, limit)
        return self.store.messages.list(self.actor.id, turn_ids=wanted)

    def _hook_input(
        self, turn: Turn, setup: AgentSetup, history: list[Message], pending: list[AsyncOperation]
    ) -> JsonObject:
        return {
            "agent_id": setup.agent.id,
            "conversation_id": self.actor.id,
            "turn_id": turn.id,
            "query": turn.input,
            "recent_messages": planning.history_messages(history, setup.agent.id),
            "pending": [
                {
                    "operation_id": op.id,
                    "tool": op.tool_name,
                    "turn_id": op.turn_id,
                    "status": op.status.value,
                }
                for op in pending
            ],
            "tools": [
                {"name": t.name, "description": t.description} for t in setup.catalog.visible()
            ],
        }

    # ------------------------------------------------------------------ the model loop

    async def _loop(
        self,
        turn_id: str,
        setup: AgentSetup,
        base: ChatRequest,
        transcript: tuple[JsonObject, ...],
        delivering: AsyncOperation | None = None,
    ) -> None:
        model = self._chat_model(setup.profile)
        max_moves = setup.persona.constraints.max_moves_per_turn
        progress = TurnProgress(turn_id, 0, transcript)
        step = CallModel(transcript=transcript)
        usage = Usage()
        while True:
            request = planning.request_for_step(base, step)
            answer, finished = await self._call_model(turn_id, model, request)
            usage = _add_usage(usage, finished)
            pending = len(
                self.store.operations.list(self.actor.id, turn_id=turn_id, statuses=WAITING)
            )
            if delivering is not None:
                pending -= 1  # the operation being answered is delivered with this answer
            decisions = planning.plan(progress, answer, setup.catalog, max_moves, pending)
            if isinstance(decisions[0], AppendAgentMessage):
                await self._finish(turn_id, setup, decisions, usage, delivering)
                return
            results = await self._run_tools(turn_id, setup, answer.tool_calls, decisions)
            self._record_tool_moves(turn_id, progress, answer, results)
            returned = ToolsReturned(calls=answer.tool_calls, results=tuple(results))
            next_step = planning.plan(progress, returned, setup.catalog, max_moves)[0]
            assert isinstance(next_step, CallModel)
            progress = TurnProgress(turn_id, progress.moves_made + 1, next_step.transcript)
            step = next_step

    def _chat_model(self, profile: ModelProfile) -> ChatModel:
        from serving.models import chat_model_for

        return chat_model_for(profile)

    async def _call_model(
        self, turn_id: str, model: ChatModel, request: ChatRequest
    ) -> tuple[ModelAnswered, ModelFinished]:
        publish = self.actor.publish

        async def attempt() -> tuple[ModelAnswered, ModelFinished]:
            text: list[str] = []
            calls: list[ToolCallRequested] = []
            finished = ModelFinished()
            async for chunk in model.stream(request):
                if isinstance(chunk, TextDelta):
                    text.append(chunk.text)
                    publish(
                        {
                            "seq": None,
                            "type": "token",
                            "conversation_id": self.actor.id,
                            "turn_id": turn_id,
                            "delta": chunk.text,
                        }
                    )
                elif isinstance(chunk, ToolCallRequested):
                    calls.append(chunk)
                else:
                    finished = chunk
            return ModelAnswered("".join(text), tuple(calls)), finished

        async def on_retry(number: int, error: Exception) -> None:
            publish(
                {
                    "seq": None,
                    "type": "llm.retry",
                    "conversation_id": self.actor.id,
                    "turn_id": turn_id,
                    "attempt": number,
                    "error": str(error),
                }
            )

        return await with_retries(LLM_CALL, attempt, on_retry)

    async def _run_tools(
        self,
        turn_id: str,
        setup: AgentSetup,
        calls: tuple[ToolCallRequested, ...],
        decisions: list[Any],
    ) -> list[ToolResult]:
        async def one(decision: DispatchTool | ReturnToolError) -> ToolResult:
            if isinstance(decision, ReturnToolError):
                return decision.result
            if decision.tool.is_async:
                return await self._dispatch_async(turn_id, setup, decision)
            return await self.actor.tools.dispatch(turn_id, setup.agent.id, decision)

        self.inflight[turn_id] = list(calls)
        results = list(await asyncio.gather(*(one(d) for d in decisions)))
        # Only a normal return clears them: a cancelled turn closes them with an error result.
        self.inflight.pop(turn_id, None)
        return results

    async def _dispatch_async(
        self, turn_id: str, setup: AgentSetup, decision: DispatchTool
    ) -> ToolResult:
        """Record the operation (intent first), hand it to the runner, acknowledge at once."""
        from actors.operations_runner import start_operation

        op = AsyncOperation(
            id=new_id("op"),
            conversation_id=self.actor.id,
            turn_id=turn_id,
            tool_call_id=decision.call.id,
            tool_id=decision.tool.id,
            tool_name=decision.tool.name,
            input=decision.input,
            created_at=utc_now(),
        )
        self.log.commit(
            op.created_at,
            [
                PendingEvent(
                    "operation.started",
                    {"turn_id": turn_id, "operation_id": op.id, "tool": op.tool_name},
                )
            ],
            lambda conn, _e: self.store.operations.insert(op, conn),
        )
        await start_operation(op.id, setup.agent.id, self.actor.env)
        return planning.async_ack(decision.call.id, op.id)

    def _record_tool_moves(
        self, turn_id: str, progress: TurnProgress, answer: ModelAnswered, results: list[ToolResult]
    ) -> None:
        now = utc_now()
        base_seq = self.store.moves.count(turn_id)
        moves: list[Move] = []
        failures: list[PendingEvent] = []
        for n, (call, result) in enumerate(zip(answer.tool_calls, results, strict=True)):
            moves.append(
                Move(
                    id=new_id("move"),
                    turn_id=turn_id,
                    sequence=base_seq + n + 1,
                    reasoning=(answer.text or None) if n == 0 else None,
                    tool_call=ToolCallRecord(
                        id=call.id, tool_id=call.name, name=call.name, input=_arguments(call)
                    ),
                    tool_result=result,
                    raw={"iteration": progress.moves_made + 1},
                    created_at=now,
                )
            )
            if not result.success:
                assert result.error is not None
                failures.append(
                    PendingEvent(
                        "tool.failed",
                        {
                            "turn_id": turn_id,
                            "tool": call.name,
                            "error": result.error.model_dump(mode="json"),
                        },
                    )
                )
        self.log.record_moves(moves, failures)

    async def _finish(
        self,
        turn_id: str,
        setup: AgentSetup,
        decisions: list[Any],
        usage: Usage,
        delivering: AsyncOperation | None,
    ) -> None:
        for decision in decisions:
            match decision:
                case AppendAgentMessage(content=content):
                    self._append_agent_message(turn_id, setup.agent.id, content, delivering)
                case AwaitOperations():
                    self._await_operations(turn_id, usage)
                case CompleteTurn():
                    await self._complete(turn_id, setup, usage)
                case FailTurn(reason=reason):
                    self.fail(turn_id, reason)
                case _:
                    raise AssertionError(f"unexpected decision {decision!r}")

    def _append_agent_message(
        self, turn_id: str, agent_id: str, content: str, delivering: AsyncOperation | None
    ) -> None:
        now = utc_now()
        move = Move(
            id=new_id("move"),
            turn_id=turn_id,
            sequence=self.store.moves.count(turn_id) + 1,
            reasoning=content,
            raw={"delivers": delivering.id} if delivering else None,
            created_at=now,
        )
        message = Message(
            id=new_id("msg"),
            conversation_id=self.actor.id,
            turn_id=turn_id,
            role=MessageRole.AGENT,
            author=agent_id,
            content=content,
            created_at=now,
        )
        delivered = (
            delivering.model_copy(update={"status": OperationStatus.DELIVERED})
            if delivering
            else None
        )
        # The answer, its move and (for a follow-up) the operation's delivery commit together:
        # a crash before this point re-delivers, after it never does.
        self.log.append_message(message, extra=[move], delivered=delivered)

    def _await_operations(self, turn_id: str, usage: Usage) -> None:
        turn = self.store.turns.get(turn_id)
        if turn.awaiting_operations:
            return
        waiting = turn.model_copy(
            update={"awaiting_operations": True, "usage": _add_usage(turn.usage, usage)}
        )
        self.log.save_turn(waiting, "turn.awaiting")

    async def _complete(self, turn_id: str, setup: AgentSetup, usage: Usage) -> None:
        turn = self.store.turns.get(turn_id)
        issues = turn.issues
        hook = setup.persona.memory_extraction_workflow_id
        if hook:
            issues = await self._extract_memories(turn, setup, hook)
        failures = sum(
            1
            for m in self.store.moves.list(turn_id)
            if m.tool_result is not None and not m.tool_result.success
        )
        done = turn.model_copy(
            update={
                "status": TurnStatus.COMPLETED,
                "completed_at": utc_now(),
                "awaiting_operations": False,
                "usage": _add_usage(turn.usage, usage),
                "issues": issues.model_copy(update={"tool_failures": failures}),
            }
        )
        self.log.save_turn(done, "turn.completed")

    async def _extract_memories(self, turn: Turn, setup: AgentSetup, hook: str) -> Any:
        transcript = [
            {"role": m.role.value, "content": m.content}
            for m in self.store.messages.list(self.actor.id, turn_ids=[turn.id])
        ]
        payload = {
            "agent_id": setup.agent.id,
            "conversation_id": self.actor.id,
            "turn_id": turn.id,
            "transcript": transcript,
        }
        try:
            await with_retries(MEMORY_EXTRACTION, lambda: self.actor.tools.run_hook(hook, payload))
        except WonderError as exc:
            log.warning("memory extraction for turn %s failed: %s", turn.id, exc.message)
            self.log.note(
                utc_now(), "memory_extraction.failed", {"turn_id": turn.id, "error": exc.to_dict()}
            )
            return turn.issues.model_copy(update={"memory_extraction_failed": True})
        return turn.issues

    # ------------------------------------------------------------------ failure and cancellation

    def fail(self, turn_id: str, reason: str, *, context_failed: bool = False) -> None:
        turn = self.store.turns.get(turn_id)
        if turn.status is not TurnStatus.ACTIVE:
            return
        issues = turn.issues.model_copy(update={"context_assembly_failed": context_failed})
        failed = turn.model_copy(
            update={
                "status": TurnStatus.FAILED,
                "failure_reason": reason,
                "completed_at": utc_now(),
                "issues": issues,
                "awaiting_operations": False,
            }
        )
        self.log.save_turn(failed, "turn.failed", {"reason": reason})

    def close_dangling(self, turn_id: str, message: str) -> None:
        """Give every open tool call of the turn an error result (sync in flight, async pending)."""
        error = ToolError(code=ErrorCode.EXECUTION_FAILED, message=message, retriable=False)
        calls = [(c.id, c.name, _arguments(c)) for c in self.inflight.pop(turn_id, [])]
        ops = self.store.operations.list(self.actor.id, turn_id=turn_id, statuses=WAITING)
        calls += [(op.tool_call_id, op.tool_name, op.input) for op in ops]
        if not calls:
            return
        now = utc_now()
        base_seq = self.store.moves.count(turn_id)
        moves = [
            Move(
                id=new_id("move"),
                turn_id=turn_id,
                sequence=base_seq + n + 1,
                tool_call=ToolCallRecord(id=call_id, tool_id=name, name=name, input=args),
                tool_result=ToolResult(tool_call_id=call_id, success=False, error=error),
                raw={"closed": True},
                created_at=now,
            )
            for n, (call_id, name, args) in enumerate(calls)
        ]
        for op in ops:
            self.store.operations.save(op.model_copy(update={"status": OperationStatus.CANCELLED}))
        self.log.record_moves(moves, [])


def _arguments(call: ToolCallRequested) -> JsonObject:
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {"_raw": call.arguments}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def _add_usage(a: Usage, b: Usage | ModelFinished) -> Usage:
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
    )
