"""The Conversation actor: the thin, effectful shell around ``planning``.

One instance per conversation, named ``conversation:<id>``, created through the directory
(``actors.conversation.directory``), which also evicts idle ones. Its state lives in the store, so
``__init__`` reloads it and recovers from a crash: a turn that was mid-loop is failed with reason
``interrupted`` (its open tool calls closed with an error result); a turn that had answered and only
waits for async operations stays active, and completed operations are re-delivered; a turn that was
acknowledged but never started is started. Each turn runs as an asyncio task (``turns.TurnRunner``),
so several turns can be active at once; what a message arriving mid-turn does is the conversation's
``concurrency_policy``: parallel (default), queue, reject or interrupt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import TypeAdapter

from actors.conversation.operations import ConversationLog, PendingEvent, event_dict
from actors.conversation.tool_dispatch import ToolDispatcher
from actors.conversation.turns import WAITING, AgentSetup, TurnRunner
from actors.stores import open_store, settings_from_env
from core.domain import (
    Caller,
    ConcurrencyPolicy,
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    OperationStatus,
    Participant,
    ToolError,
    ToolResult,
    Turn,
    TurnStatus,
    UserCaller,
)
from core.errors import Conflict, ErrorCode, InvalidInput, NotFound, RetryableError
from core.ids import new_id, utc_now

log = logging.getLogger("wonder.conversation")

JsonObject = dict[str, Any]
CALLER = TypeAdapter(Caller)
MENTION = re.compile(r"(?<![\w@])@([A-Za-z0-9_.:-]+)")

__all__ = ["AgentSetup", "ConversationActor", "Hibernating"]


def coalesce_tokens(
    item: JsonObject, queue: asyncio.Queue[JsonObject]
) -> tuple[JsonObject, JsonObject | None]:
    """Merge the token deltas already waiting behind ``item`` (same turn) into one event.

    A subscriber that keeps up gets every token as it comes; one that falls behind (a slow
    WebSocket, many streams on few cores) gets fewer, larger deltas instead of a growing backlog.
    Returns the event to send and the first queued event that could not be merged, if any.
    """
    if item.get("type") != "token":
        return item, None
    while not queue.empty():
        following = queue.get_nowait()
        if following.get("type") != "token" or following.get("turn_id") != item.get("turn_id"):
            return item, following
        item = {**item, "delta": item["delta"] + following["delta"]}
    return item, None


class Hibernating(RetryableError):
    """The actor is being evicted; the caller re-activates the conversation and retries."""


class ConversationActor:
    """Plain Python; ``cluster.actors`` applies ``ray.remote`` with name and lifetime."""

    def __init__(self, conversation_id: str, settings_env: dict[str, str] | None = None) -> None:
        self.id = conversation_id
        self.env = settings_env or {k: v for k, v in os.environ.items() if k.startswith("WONDER_")}
        self.settings = settings_from_env(self.env)
        self.store = open_store(self.env)
        self.conversation: Conversation = self.store.conversations.get(conversation_id)
        self._subscribers: set[asyncio.Queue[JsonObject]] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._queued: list[str] = []
        self._last_activity = time.monotonic()
        self._closing = False
        self._started = False
        self._background: list[asyncio.Task[None]] = []
        self.log = ConversationLog(self.store, conversation_id, self.publish)
        self.tools = ToolDispatcher(self)
        self.turns = TurnRunner(self)
        self._to_start, self._to_deliver = self._recover()

    # ------------------------------------------------------------------ lifecycle

    def _recover(self) -> tuple[list[str], list[str]]:
        """Classify turns left active by a previous incarnation (see the module docstring)."""
        to_start: list[str] = []
        to_deliver: list[str] = []
        for turn in self.store.turns.list(self.id, status=TurnStatus.ACTIVE):
            if turn.started_at is None:
                to_start.append(turn.id)
            elif turn.awaiting_operations:
                ops = self.store.operations.list(self.id, turn_id=turn.id, statuses=WAITING)
                to_deliver += [op.id for op in ops]
            else:
                self.turns.close_dangling(turn.id, "the conversation restarted mid-turn")
                self.turns.fail(turn.id, "interrupted")
                log.info("turn %s of %s marked interrupted after restart", turn.id, self.id)
        return to_start, to_deliver

    def _touch(self) -> None:
        if self._closing:
            raise Hibernating(f"conversation {self.id} is hibernating")
        self._last_activity = time.monotonic()
        if not self._started:
            self._started = True
            loop = asyncio.get_running_loop()
            self._background = [
                loop.create_task(self._watch_idle()),
                loop.create_task(self._resume_recovered()),
                loop.create_task(self._prewarm_model()),
            ]

    async def _resume_recovered(self) -> None:
        to_start, self._to_start = self._to_start, []
        for turn_id in to_start:
            if turn_id in self._tasks:
                continue  # already started by run_agent_turn
            turn = self._mark_started(self.store.turns.get(turn_id))
            self._launch(turn_id, self.turns.run(turn))
        if self._to_deliver:
            from actors.operations_runner import running_operations

            running = set(await running_operations())
            for op_id in self._to_deliver:
                op = self.store.operations.get(op_id)
                if op.status is OperationStatus.PENDING and op.id not in running:
                    lost = ToolResult(
                        tool_call_id=op.tool_call_id,
                        success=False,
                        error=ToolError(
                            code=ErrorCode.EXECUTION_FAILED,
                            message="the operation was lost",
                            retriable=True,
                        ),
                    )
                    self.store.operations.save(
                        op.model_copy(update={"status": OperationStatus.COMPLETED, "result": lost})
                    )
                if self.store.operations.get(op_id).status is OperationStatus.COMPLETED:
                    self._launch(f"{op.turn_id}:{op_id}", self.turns.follow_up(op_id))

    async def _prewarm_model(self) -> None:
        """Resolve the local model's handle now, not on the first turn (≈ 0.5 s of imports)."""
        try:
            agent_id = self.conversation.agent_id
            if agent_id is None:
                return
            profile = self.turns.load_setup_for(agent_id).profile
            if profile.provider == "vllm":
                from serving.llm_client import prewarm

                await asyncio.to_thread(prewarm)
        except Exception:  # an optimisation only: the first turn resolves it otherwise
            log.debug("model prewarm for %s skipped", self.id, exc_info=True)

    def is_idle(self) -> bool:
        awaiting = self.store.turns.list(self.id, status=TurnStatus.ACTIVE)
        return not self._tasks and not self._subscribers and not awaiting

    async def status(self) -> JsonObject:
        self._touch()
        return {
            "conversation_id": self.id,
            "active_turns": sorted({key.split(":")[0] for key in self._tasks}),
            "queued_turns": list(self._queued),
            "subscribers": len(self._subscribers),
            "idle_s": time.monotonic() - self._last_activity,
            "pid": os.getpid(),
            "last_seq": self.log.seq,
            "policy": self.conversation.concurrency_policy.value,
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
            if time.monotonic() - self._last_activity >= ttl and self.is_idle():
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
        agent_id: str | None = None,
    ) -> JsonObject:
        """Persist a user message and its turn, start (or queue) the turn, acknowledge the ids.

        ``agent_id`` (or an ``@agent`` mention of a participant) picks which agent answers.
        """
        self._touch()
        if message_id is not None:
            existing = self._existing_ack(message_id)
            if existing is not None:
                return existing
        if self.conversation.status in (ConversationStatus.COMPLETED, ConversationStatus.FAILED):
            raise Conflict(f"conversation {self.id} is {self.conversation.status.value}")
        policy = self.conversation.concurrency_policy
        busy = bool(self._tasks) or bool(self._queued)
        if busy and policy is ConcurrencyPolicy.REJECT:
            raise Conflict("a turn is active and this conversation rejects messages mid-turn")
        if busy and policy is ConcurrencyPolicy.INTERRUPT:
            for turn_id in sorted({key.split(":")[0] for key in self._tasks}):
                await self.cancel_turn(turn_id, "interrupted by a new message")
        queue = busy and policy is ConcurrencyPolicy.QUEUE
        turn, message = self._new_turn(
            content,
            author,
            UserCaller(user_id=author),
            source,
            reply_to_message_id,
            message_id,
            self._addressee(content, agent_id),
            started=not queue,
        )
        stored = self.log.begin_turn(turn, message)
        if queue:
            self._queued.append(turn.id)
        else:
            self._launch(turn.id, self.turns.run(turn))
        return {"turn_id": turn.id, "message_id": stored.id, "seq": stored.seq, "queued": queue}

    def _existing_ack(self, message_id: str) -> JsonObject | None:
        try:
            message = self.store.messages.get(message_id)
        except NotFound:
            return None
        if message.conversation_id != self.id:
            raise Conflict(f"message id {message_id} is used by another conversation")
        return {
            "turn_id": message.turn_id,
            "message_id": message.id,
            "seq": message.seq,
            "queued": False,
        }

    def _addressee(self, content: str, agent_id: str | None) -> str | None:
        agents = {p.id for p in self.conversation.participants if p.type == "agent"}
        if agent_id is not None:
            if agent_id not in agents and agent_id != self.conversation.agent_id:
                raise InvalidInput(f"agent {agent_id} is not a participant of this conversation")
            return agent_id
        for mention in MENTION.findall(content):
            if mention in agents:
                return str(mention)
        return self.conversation.agent_id

    async def start_agent_call(
        self, input: str, caller: JsonObject, mode: str = "delegate"
    ) -> JsonObject:
        """Run one turn for another agent or a workflow and return its answer."""
        self._touch()
        parsed = CALLER.validate_python(caller)
        author = getattr(parsed, "agent_id", None) or getattr(parsed, "run_id", "workflow")
        source = "agent" if parsed.type == "agent" else "trigger"
        turn, message = self._new_turn(
            input, author, parsed, source, None, None, self.conversation.agent_id, started=True
        )
        self.log.begin_turn(turn, message)
        return await self._answer(turn.id, self._launch(turn.id, self.turns.run(turn)))

    async def run_agent_turn(self, turn_id: str) -> JsonObject:
        """Run a turn written by whoever created this conversation (a delegated child's first)."""
        self._touch()
        task = self._tasks.get(turn_id)
        if turn_id in self._to_start:
            self._to_start.remove(turn_id)
        if task is None:
            turn = self.store.turns.get(turn_id)
            if turn.status is TurnStatus.ACTIVE:
                turn = self._mark_started(turn)
                task = self._launch(turn_id, self.turns.run(turn))
        return await self._answer(turn_id, task)

    async def _answer(self, turn_id: str, task: asyncio.Task[None] | None) -> JsonObject:
        if task is not None:
            await asyncio.shield(task)
        done = self.store.turns.get(turn_id)
        answers = [
            m
            for m in self.store.messages.list(self.id, turn_ids=[turn_id])
            if m.role is MessageRole.AGENT
        ]
        return {
            "conversation_id": self.id,
            "turn_id": turn_id,
            "status": done.status.value,
            "failure_reason": done.failure_reason,
            "content": answers[-1].content if answers else "",
        }

    async def deliver_operation(self, op_id: str) -> bool:
        """An async operation finished: answer with its result on its turn (exactly once)."""
        self._touch()
        op = self.store.operations.get(op_id)
        if op.conversation_id != self.id:
            raise NotFound(f"operation {op_id} not found in this conversation")
        if op.status is not OperationStatus.COMPLETED:
            return False
        self._launch(f"{op.turn_id}:{op_id}", self.turns.follow_up(op_id))
        return True

    async def cancel_turn(self, turn_id: str, reason: str = "cancelled") -> JsonObject:
        """Stop a turn: its open tool calls get an error result and it fails with ``reason``."""
        self._touch()
        turn = self.store.turns.get(turn_id)
        if turn.conversation_id != self.id:
            raise NotFound(f"turn {turn_id} not found in this conversation")
        tasks = [t for key, t in self._tasks.items() if key.split(":")[0] == turn_id]
        self.turns.cancel_reasons[turn_id] = reason
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if turn_id in self._queued:
            self._queued.remove(turn_id)
        self.turns.cancel_reasons.pop(turn_id, None)
        self.turns.close_dangling(turn_id, reason)
        self.turns.fail(turn_id, reason)
        return {"turn_id": turn_id, "status": self.store.turns.get(turn_id).status.value}

    async def wait_for_turn(self, turn_id: str, timeout_s: float = 300.0) -> JsonObject:
        """Wait until ``turn_id`` stops running here; returns its stored status."""
        self._touch()
        deadline = time.monotonic() + timeout_s
        while True:
            tasks = [t for key, t in self._tasks.items() if key.split(":")[0] == turn_id]
            if not tasks and turn_id not in self._queued:
                break
            if tasks:
                await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            else:
                await asyncio.sleep(0.01)
            if time.monotonic() > deadline:
                break
        turn = self.store.turns.get(turn_id)
        if turn.conversation_id != self.id:
            raise NotFound(f"turn {turn_id} not found in this conversation")
        return {
            "turn_id": turn.id,
            "status": turn.status.value,
            "failure_reason": turn.failure_reason,
            "awaiting_operations": turn.awaiting_operations,
        }

    async def add_participant(self, agent_id: str) -> JsonObject:
        """Loop an agent in: it sees this conversation's history and answers when addressed."""
        self._touch()
        if any(p.id == agent_id for p in self.conversation.participants):
            return {"agent_id": agent_id, "joined": False}
        participants = [*self.conversation.participants, Participant(type="agent", id=agent_id)]
        self._save_conversation(
            self.conversation.model_copy(update={"participants": participants}),
            "participant_joined",
            {"agent_id": agent_id},
        )
        return {"agent_id": agent_id, "joined": True}

    async def remove_participant(self, agent_id: str) -> JsonObject:
        self._touch()
        if agent_id == self.conversation.agent_id:
            raise InvalidInput("the primary agent cannot leave its conversation")
        participants = [p for p in self.conversation.participants if p.id != agent_id]
        if len(participants) == len(self.conversation.participants):
            raise NotFound(f"agent {agent_id} is not a participant")
        self._save_conversation(
            self.conversation.model_copy(update={"participants": participants}),
            "participant_left",
            {"agent_id": agent_id},
        )
        return {"agent_id": agent_id, "left": True}

    async def set_policy(self, policy: str) -> JsonObject:
        self._touch()
        chosen = ConcurrencyPolicy(policy)
        self._save_conversation(
            self.conversation.model_copy(update={"concurrency_policy": chosen}),
            "conversation_updated",
            {"concurrency_policy": chosen.value},
        )
        return {"concurrency_policy": chosen.value}

    async def shutdown(self, reason: str = "conversation deleted") -> JsonObject:
        """Stop everything running here (before the conversation is deleted); refuse new work."""
        turn_ids = sorted({key.split(":")[0] for key in self._tasks})
        for turn_id in turn_ids:
            await self.cancel_turn(turn_id, reason)
        self._closing = True
        return {"conversation_id": self.id, "cancelled_turns": turn_ids}

    async def complete(self) -> JsonObject:
        """Mark the conversation completed (only by explicit user action)."""
        self._touch()
        done = self.conversation.model_copy(update={"status": ConversationStatus.COMPLETED})
        self._save_conversation(done, "conversation_ended", {"status": done.status.value})
        return {"conversation_id": self.id, "status": done.status.value}

    def _save_conversation(self, updated: Conversation, event: str, payload: JsonObject) -> None:
        self.log.commit(
            utc_now(),
            [PendingEvent(event, payload)],
            lambda conn, _e: self.store.conversations.save(updated, conn),
        )
        self.conversation = updated

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
            held: JsonObject | None = None
            while True:
                item = held if held is not None else await queue.get()
                item, held = coalesce_tokens(item, queue)
                seq = item.get("seq")
                if seq is not None:
                    if seq <= last:
                        continue
                    last = seq
                yield item
        finally:
            self._subscribers.discard(queue)
            self._last_activity = time.monotonic()

    def publish(self, event: JsonObject) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)

    # ------------------------------------------------------------------ turns

    def _new_turn(
        self,
        content: str,
        author: str,
        caller: Any,
        source: str,
        reply_to_message_id: str | None,
        message_id: str | None,
        agent_id: str | None,
        *,
        started: bool,
    ) -> tuple[Turn, Message]:
        now = utc_now()
        turn = Turn(
            id=new_id("turn"),
            conversation_id=self.id,
            agent_id=agent_id,
            parent_turn_id=self._parent_turn(reply_to_message_id),
            caller=caller,
            input=content,
            source=source,
            reply_to_message_id=reply_to_message_id,  # type: ignore[arg-type]
            created_at=now,
            started_at=now if started else None,
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
            try:
                replied = self.store.messages.get(reply_to_message_id)
            except NotFound:
                replied = None
            if replied is None or replied.conversation_id != self.id:
                raise NotFound(f"message {reply_to_message_id} not found in this conversation")
            return replied.turn_id
        latest = self.store.turns.list(self.id, last=1)
        return latest[-1].id if latest else None

    def _mark_started(self, turn: Turn) -> Turn:
        started = turn.model_copy(update={"started_at": utc_now()})
        self.store.turns.save(started)
        return started

    def _launch(self, key: str, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._finished(key))
        return task

    def _finished(self, key: str) -> None:
        self._tasks.pop(key, None)
        self._last_activity = time.monotonic()
        if self._queued and not self._tasks:
            turn = self._mark_started(self.store.turns.get(self._queued.pop(0)))
            self._launch(turn.id, self.turns.run(turn))
