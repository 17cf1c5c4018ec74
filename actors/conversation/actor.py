"""The Conversation actor: the thin, effectful shell around ``planning``.

One instance per conversation, named ``conversation:<id>``, created through the directory
(``actors.conversation.directory``), which also evicts idle ones. Its state lives in the store:
``__init__`` reloads it, and a turn a crash left ``active`` is failed with reason ``interrupted``.
Each turn runs as an asyncio task, so several turns can be active at once.

A turn: persist message + turn (then acknowledge) → context assembly → model call (streamed) →
tools → ... → agent message → memory extraction → completed. Planning decides each next step from
what just happened; this class only performs the effects and feeds their outcomes back in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from actors.actions import ActionContext
from actors.conversation import planning
from actors.conversation.domain import (
    AppendAgentMessage,
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
from actors.conversation.operations import ConversationLog, PendingEvent, event_dict
from actors.conversation.tool_dispatch import ToolDispatcher
from actors.stores import open_store, settings_from_env
from core.domain import (
    Agent,
    AgentCaller,
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    ModelProfile,
    Move,
    Persona,
    ToolCallRecord,
    ToolResult,
    Turn,
    TurnStatus,
    Usage,
    UserCaller,
)
from core.errors import Conflict, NotFound, RetryableError, WonderError
from core.ids import new_id, utc_now
from core.llm.protocol import ChatModel, ChatRequest, ModelFinished, TextDelta, ToolCallRequested
from core.retry import CONTEXT_ASSEMBLY, LLM_CALL, MEMORY_EXTRACTION, with_retries

log = logging.getLogger("wonder.conversation")

JsonObject = dict[str, Any]


class Hibernating(RetryableError):
    """The actor is being evicted; the caller re-activates the conversation and retries."""


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What a turn needs to know about its agent, loaded once per turn."""

    agent: Agent
    persona: Persona
    profile: ModelProfile
    catalog: ToolCatalog


class ConversationActor:
    """Plain Python; ``cluster.actors`` applies ``ray.remote`` with name and lifetime."""

    def __init__(self, conversation_id: str, settings_env: dict[str, str] | None = None) -> None:
        self.id = conversation_id
        self.env = settings_env or {k: v for k, v in os.environ.items() if k.startswith("WONDER_")}
        self.settings = settings_from_env(self.env)
        self.store = open_store(self.env)
        self.conversation: Conversation = self.store.conversations.get(conversation_id)
        self._subscribers: set[asyncio.Queue[JsonObject]] = set()
        self._turns: dict[str, asyncio.Task[None]] = {}
        self._last_activity = time.monotonic()
        self._closing = False
        self._watchdog: asyncio.Task[None] | None = None
        self.log = ConversationLog(self.store, conversation_id, self._publish)
        self.tools = ToolDispatcher(self)
        self._recover_interrupted_turns()

    # ------------------------------------------------------------------ lifecycle

    def _recover_interrupted_turns(self) -> None:
        for turn in self.store.turns.list(self.id, status=TurnStatus.ACTIVE):
            failed = turn.model_copy(
                update={
                    "status": TurnStatus.FAILED,
                    "failure_reason": "interrupted",
                    "completed_at": utc_now(),
                }
            )
            self.log.save_turn(failed, "turn.failed", {"reason": "interrupted"})
            log.info("turn %s of %s marked interrupted after restart", turn.id, self.id)

    def _touch(self) -> None:
        if self._closing:
            raise Hibernating(f"conversation {self.id} is hibernating")
        self._last_activity = time.monotonic()
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_idle())

    def is_idle(self) -> bool:
        return not self._turns and not self._subscribers

    async def status(self) -> JsonObject:
        return {
            "conversation_id": self.id,
            "active_turns": sorted(self._turns),
            "subscribers": len(self._subscribers),
            "idle_s": time.monotonic() - self._last_activity,
            "pid": os.getpid(),
            "last_seq": self.log.seq,
        }

    async def try_hibernate(self) -> bool:
        """Agree to be evicted if idle; everything is already persisted, so nothing to flush."""
        if not self.is_idle():
            return False
        self._closing = True
        return True

    async def _watch_idle(self) -> None:
        ttl = self.settings.conversation_idle_ttl_s
        while not self._closing:
            await asyncio.sleep(min(max(ttl / 4, 0.05), 5.0))
            if self.is_idle() and time.monotonic() - self._last_activity >= ttl:
                from cluster.actors import release_idle

                await release_idle(self.id)

    # ------------------------------------------------------------------ entry points

    async def post_message(
        self,
        content: str,
        author: str,
        *,
        message_id: str | None = None,
        source: str = "human",
        reply_to_message_id: str | None = None,
    ) -> JsonObject:
        """Persist a user message and its turn, start the turn, and acknowledge with their ids."""
        self._touch()
        if message_id is not None:
            existing = self._existing_ack(message_id)
            if existing is not None:
                return existing
        if self.conversation.status in (ConversationStatus.COMPLETED, ConversationStatus.FAILED):
            raise Conflict(f"conversation {self.id} is {self.conversation.status.value}")
        turn, message = self._new_turn(
            content, author, UserCaller(user_id=author), source, reply_to_message_id, message_id
        )
        stored = self.log.begin_turn(turn, message)
        self._start(turn)
        return {"turn_id": turn.id, "message_id": stored.id, "seq": stored.seq}

    def _existing_ack(self, message_id: str) -> JsonObject | None:
        try:
            message = self.store.messages.get(message_id)
        except NotFound:
            return None
        if message.conversation_id != self.id:
            raise Conflict(f"message id {message_id} is used by another conversation")
        return {"turn_id": message.turn_id, "message_id": message.id, "seq": message.seq}

    async def start_agent_call(
        self, input: str, caller: JsonObject, mode: str = "delegate"
    ) -> JsonObject:
        """Run one turn for another agent (delegate mode) and return its answer."""
        self._touch()
        agent_caller = AgentCaller.model_validate(caller)
        turn, message = self._new_turn(
            input, agent_caller.agent_id, agent_caller, "agent", None, None
        )
        self.log.begin_turn(turn, message)
        task = self._start(turn)
        await asyncio.shield(task)
        done = self.store.turns.get(turn.id)
        answer = [
            m
            for m in self.store.messages.list(self.id, turn_ids=[turn.id])
            if m.role is MessageRole.AGENT
        ]
        return {
            "conversation_id": self.id,
            "turn_id": turn.id,
            "status": done.status.value,
            "failure_reason": done.failure_reason,
            "content": answer[-1].content if answer else "",
        }

    async def wait_for_turn(self, turn_id: str, timeout_s: float = 300.0) -> JsonObject:
        """Wait until ``turn_id`` is no longer running here; returns its stored status."""
        task = self._turns.get(turn_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        turn = self.store.turns.get(turn_id)
        if turn.conversation_id != self.id:
            raise NotFound(f"turn {turn_id} not found in this conversation")
        return {"turn_id": turn.id, "status": turn.status.value,
                "failure_reason": turn.failure_reason}

    async def complete(self) -> JsonObject:
        """Mark the conversation completed (only by explicit user action)."""
        self._touch()
        self.conversation = self.conversation.model_copy(
            update={"status": ConversationStatus.COMPLETED}
        )
        conv = self.conversation
        self.log.commit(
            utc_now(),
            [PendingEvent("conversation_ended", {"status": conv.status.value})],
            lambda conn, _e: self.store.conversations.save(conv, conn),
        )
        return {"conversation_id": self.id, "status": conv.status.value}

    async def events(self, after_seq: int = 0) -> AsyncIterator[JsonObject]:
        """Stored events after ``after_seq``, then live ones (token deltas have ``seq`` None)."""
        self._touch()
        queue: asyncio.Queue[JsonObject] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            last = after_seq
            for event in self.store.events.list(self.id, after_seq):
                last = event.seq
                yield event_dict(event)
            while True:
                item = await queue.get()
                seq = item.get("seq")
                if seq is not None:
                    if seq <= last:
                        continue
                    last = seq
                yield item
        finally:
            self._subscribers.discard(queue)
            self._last_activity = time.monotonic()

    def _publish(self, event: JsonObject) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)

    # ------------------------------------------------------------------ turns

    def _new_turn(
        self,
        content: str,
        author: str,
        caller: UserCaller | AgentCaller,
        source: str,
        reply_to_message_id: str | None,
        message_id: str | None,
    ) -> tuple[Turn, Message]:
        now = utc_now()
        turn = Turn(
            id=new_id("turn"),
            conversation_id=self.id,
            agent_id=self.conversation.agent_id,
            parent_turn_id=self._parent_turn(reply_to_message_id),
            caller=caller,
            input=content,
            source=source,  # type: ignore[arg-type]
            reply_to_message_id=reply_to_message_id,
            created_at=now,
        )
        message = Message(
            id=message_id or new_id("msg"),
            conversation_id=self.id,
            turn_id=turn.id,
            role=MessageRole.USER,
            author=author,
            content=content,
            created_at=now,
        )
        return turn, message

    def _parent_turn(self, reply_to_message_id: str | None) -> str | None:
        if reply_to_message_id is not None:
            replied = self.store.messages.get(reply_to_message_id)
            if replied.conversation_id != self.id:
                raise NotFound(f"message {reply_to_message_id} not found in this conversation")
            return replied.turn_id
        latest = self.store.turns.list(self.id, last=1)
        return latest[-1].id if latest else None

    def _start(self, turn: Turn) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._run_turn(turn))
        self._turns[turn.id] = task
        task.add_done_callback(lambda _t: self._turn_finished(turn.id))
        return task

    def _turn_finished(self, turn_id: str) -> None:
        self._turns.pop(turn_id, None)
        self._last_activity = time.monotonic()

    async def _run_turn(self, turn: Turn) -> None:
        try:
            setup = self._load_setup()
            base = await self._assemble_context(turn, setup)
            if base is None:
                return
            await self._loop(turn, setup, base)
        except WonderError as exc:
            log.warning("turn %s failed: %s", turn.id, exc.message)
            self._fail(turn.id, exc.message)
        except Exception as exc:  # the loop must never leave a turn dangling
            log.exception("turn %s crashed", turn.id)
            self._fail(turn.id, f"internal error: {type(exc).__name__}: {exc}")

    def _load_setup(self) -> AgentSetup:
        if self.conversation.agent_id is None:
            raise NotFound("this conversation has no agent to answer")
        agent = self.store.agents.get(self.conversation.agent_id)
        if agent.persona is not None:
            persona = agent.persona
        elif agent.persona_ref is not None:
            persona = self.store.personas.get(agent.persona_ref.id, agent.persona_ref.version)
        else:
            raise NotFound(f"agent {agent.id} has no persona")
        profile = self.store.model_profiles.get(persona.model_profile_id)
        tools = [self.store.tools.get(tool_id) for tool_id in persona.tool_ids]
        return AgentSetup(agent, persona, profile, planning.build_catalog(persona, tools))

    async def _assemble_context(self, turn: Turn, setup: AgentSetup) -> ChatRequest | None:
        history = self._recent_history(turn, setup.persona.recent_turns_limit)
        system_context = ""
        hook = setup.persona.context_assembly_workflow_id
        if hook:
            try:
                result = await with_retries(
                    CONTEXT_ASSEMBLY,
                    lambda: self.tools.run_hook(hook, self._hook_input(turn, setup, history)),
                )
            except WonderError as exc:
                self.log.note(
                    utc_now(),
                    "context_assembly.failed",
                    {"turn_id": turn.id, "error": exc.to_dict()},
                )
                self._fail(
                    turn.id, f"context assembly failed: {exc.message}", context_assembly_failed=True
                )
                return None
            system_context = str((result or {}).get("system_context") or "")
        return planning.assemble_context(
            setup.persona, setup.profile, history, setup.catalog, setup.agent.id, system_context
        )

    def _recent_history(self, turn: Turn, limit: int) -> list[Message]:
        turn_ids = [t.id for t in self.store.turns.list(self.id, last=limit + 1)]
        wanted = planning.recent_turn_ids(turn_ids, turn.id, limit)
        return self.store.messages.list(self.id, turn_ids=wanted)

    def _hook_input(self, turn: Turn, setup: AgentSetup, history: list[Message]) -> JsonObject:
        return {
            "agent_id": setup.agent.id,
            "conversation_id": self.id,
            "turn_id": turn.id,
            "query": turn.input,
            "recent_messages": planning.history_messages(history, setup.agent.id),
            "pending": [],
            "tools": [
                {"name": t.name, "description": t.description} for t in setup.catalog.visible()
            ],
        }

    async def _loop(self, turn: Turn, setup: AgentSetup, base: ChatRequest) -> None:
        model = self._chat_model(setup.profile)
        max_moves = setup.persona.constraints.max_moves_per_turn
        progress = TurnProgress(turn.id)
        step = CallModel(transcript=())
        usage = Usage()
        while True:
            answer, finished = await self._call_model(
                turn.id, model, planning.request_for_step(base, step)
            )
            usage = Usage(
                prompt_tokens=usage.prompt_tokens + finished.prompt_tokens,
                completion_tokens=usage.completion_tokens + finished.completion_tokens,
            )
            decisions = planning.plan(progress, answer, setup.catalog, max_moves)
            if isinstance(decisions[0], AppendAgentMessage | FailTurn):
                await self._finish(turn.id, setup, answer.text, decisions, progress, usage)
                return
            results = await self._run_tools(turn.id, setup, decisions)
            self._record_tool_moves(turn.id, progress, answer, results)
            returned = ToolsReturned(calls=answer.tool_calls, results=tuple(results))
            next_step = planning.plan(progress, returned, setup.catalog, max_moves)[0]
            assert isinstance(next_step, CallModel)
            progress = TurnProgress(turn.id, progress.moves_made + 1, next_step.transcript)
            step = next_step

    def _chat_model(self, profile: ModelProfile) -> ChatModel:
        from serving.models import chat_model_for

        return chat_model_for(profile)

    async def _call_model(
        self, turn_id: str, model: ChatModel, request: ChatRequest
    ) -> tuple[ModelAnswered, ModelFinished]:
        async def attempt() -> tuple[ModelAnswered, ModelFinished]:
            text: list[str] = []
            calls: list[ToolCallRequested] = []
            finished = ModelFinished()
            async for chunk in model.stream(request):
                if isinstance(chunk, TextDelta):
                    text.append(chunk.text)
                    self._publish(
                        {
                            "seq": None,
                            "type": "token",
                            "conversation_id": self.id,
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
            self._publish(
                {
                    "seq": None,
                    "type": "llm.retry",
                    "conversation_id": self.id,
                    "turn_id": turn_id,
                    "attempt": number,
                    "error": str(error),
                }
            )

        policy = LLM_CALL
        return await with_retries(policy, attempt, on_retry)

    async def _run_tools(
        self, turn_id: str, setup: AgentSetup, decisions: list[Any]
    ) -> list[ToolResult]:
        async def one(decision: DispatchTool | ReturnToolError) -> ToolResult:
            if isinstance(decision, ReturnToolError):
                return decision.result
            return await self.tools.dispatch(turn_id, setup, decision)

        return list(await asyncio.gather(*(one(d) for d in decisions)))

    def _record_tool_moves(
        self, turn_id: str, progress: TurnProgress, answer: ModelAnswered, results: list[ToolResult]
    ) -> None:
        now = utc_now()
        base_seq = len(self.store.moves.list(turn_id))
        moves: list[Move] = []
        failures: list[PendingEvent] = []
        for n, (call, result) in enumerate(zip(answer.tool_calls, results, strict=True)):
            moves.append(
                Move(
                    id=new_id("move"),
                    turn_id=turn_id,
                    sequence=base_seq + n + 1,
                    reasoning=answer.text or None if n == 0 else None,
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
        text: str,
        decisions: list[Any],
        progress: TurnProgress,
        usage: Usage,
    ) -> None:
        for decision in decisions:
            match decision:
                case AppendAgentMessage(content=content):
                    self._append_agent_message(turn_id, setup.agent.id, content, progress)
                case CompleteTurn():
                    await self._complete(turn_id, setup, usage)
                case FailTurn(reason=reason):
                    self._fail(turn_id, reason)
                case _:
                    raise AssertionError(f"unexpected decision {decision!r}")

    def _append_agent_message(
        self, turn_id: str, agent_id: str, content: str, progress: TurnProgress
    ) -> None:
        now = utc_now()
        move = Move(
            id=new_id("move"),
            turn_id=turn_id,
            sequence=len(self.store.moves.list(turn_id)) + 1,
            reasoning=content,
            raw={"iteration": progress.moves_made + 1},
            created_at=now,
        )
        self.log.record_moves([move], [])
        self.log.append_message(
            Message(
                id=new_id("msg"),
                conversation_id=self.id,
                turn_id=turn_id,
                role=MessageRole.AGENT,
                author=agent_id,
                content=content,
                created_at=now,
            )
        )

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
                "usage": usage,
                "issues": issues.model_copy(update={"tool_failures": failures}),
            }
        )
        self.log.save_turn(done, "turn.completed")

    async def _extract_memories(self, turn: Turn, setup: AgentSetup, hook: str) -> Any:
        transcript = [
            {"role": m.role.value, "content": m.content}
            for m in self.store.messages.list(self.id, turn_ids=[turn.id])
        ]
        payload = {
            "agent_id": setup.agent.id,
            "conversation_id": self.id,
            "turn_id": turn.id,
            "transcript": transcript,
        }
        try:
            await with_retries(MEMORY_EXTRACTION, lambda: self.tools.run_hook(hook, payload))
        except WonderError as exc:
            log.warning("memory extraction for turn %s failed: %s", turn.id, exc.message)
            self.log.note(
                utc_now(), "memory_extraction.failed", {"turn_id": turn.id, "error": exc.to_dict()}
            )
            return turn.issues.model_copy(update={"memory_extraction_failed": True})
        return turn.issues

    def _fail(self, turn_id: str, reason: str, *, context_assembly_failed: bool = False) -> None:
        turn = self.store.turns.get(turn_id)
        if turn.status is not TurnStatus.ACTIVE:
            return
        issues = turn.issues.model_copy(update={"context_assembly_failed": context_assembly_failed})
        failed = turn.model_copy(
            update={
                "status": TurnStatus.FAILED,
                "failure_reason": reason,
                "completed_at": utc_now(),
                "issues": issues,
            }
        )
        self.log.save_turn(failed, "turn.failed", {"reason": reason})


def _arguments(call: ToolCallRequested) -> JsonObject:
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {"_raw": call.arguments}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def hook_context(actor: ConversationActor, turn_id: str, agent_id: str) -> ActionContext:
    return ActionContext(
        client_id=actor.conversation.client_id,
        conversation_id=actor.id,
        agent_id=agent_id,
        turn_id=turn_id,
        settings_env=actor.env,
    )
