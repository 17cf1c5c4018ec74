"""The Conversation actor: the thin, effectful shell around the state machine in ``planning``.

One instance per conversation, named ``conversation:<id>``, created through the directory
(``actors.conversation.directory``), which also evicts idle ones. Every entry point and every step
outcome becomes an event, handled the same way (``_handle``): plan → persist what the decisions
write (one transaction) → apply them to the state → perform their effects, whose outcomes come back
as the next events. Its state lives in the store, so a new incarnation reloads it: the first call
hands ``Recovered`` to planning, which decides what a crash left behind (see ``planning``).
Collaborators arrive as ports at construction (``ConversationPorts``); nothing here reaches up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from typing import Any, assert_never

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from actors.conversation.domain import (
    AddUsage,
    AdoptContext,
    AppendAgentMessage,
    AssembleContext,
    AwaitOperations,
    BeginTurn,
    CallModel,
    CancelRequested,
    CheckOperations,
    CloseDangling,
    CompleteTurn,
    CompletionRequested,
    ConversationEvent,
    ConversationState,
    Decision,
    ExtractMemories,
    FailTurn,
    HoldDelivery,
    MarkConversation,
    MessageReceived,
    NoteEvent,
    OperationCompleted,
    ParticipantAdded,
    ParticipantRemoved,
    PolicySet,
    QueueTurn,
    RecordMoves,
    Recovered,
    RecoveredTurn,
    Refuse,
    ResumeLoop,
    ResumeTurn,
    RunTools,
    SaveConversation,
    SettleExtraction,
    SettleOperation,
    StartedTools,
    StartTurn,
    StepFailed,
    StopWork,
    TurnRequested,
    WaitForOperations,
)
from actors.conversation.folding import apply
from actors.conversation.intake import (
    ParentMoved,
    existing_ack,
    follows_latest,
    parent_turn,
    raise_refusal,
)
from actors.conversation.log import ConversationLog, PendingWrite, event_dict, token_event
from actors.conversation.planning import plan
from actors.conversation.ports import ConversationPorts, ConversationPortsFactory
from actors.conversation.records import WAITING, BatchWriter
from actors.conversation.resumption import RECOVERY_EVENTS, started_tools
from actors.conversation.steps import TurnSteps
from actors.conversation.tool_dispatch import ToolDispatcher
from core.domain import (
    AgentCaller,
    Caller,
    ConcurrencyPolicy,
    Event,
    Message,
    MessageRole,
    MessageSource,
    OperationStatus,
    ToolError,
    TurnStatus,
    UserCaller,
    WorkflowCaller,
)
from core.errors import (
    ErrorCode,
    NotFound,
    RetryableError,
    Unavailable,
    WonderError,
)
from core.ids import new_id, new_id_after, utc_now
from core.jsontypes import JsonObject
from core.llm.protocol import ChatModel
from core.metrics import TurnMetrics
from core.ports import (
    AgentAnswer,
    ConversationChange,
    InvocationMode,
    MessageAck,
    ParticipantChange,
    TurnOutcome,
)
from core.retry import STORE_OUTAGE, with_retries

log = logging.getLogger("wonder.conversation")
PARENT_READS = 3  # reads of a new turn's parent while the caller acknowledges turns meanwhile


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
    """Plain Python; ``cluster`` applies ``ray.remote`` with its name and lifetime.

    An actor may be started before its conversation exists (the directory's reserve of warm
    actors for new conversations): it binds to the stored conversation on its first call.
    """

    state: ConversationState
    log: ConversationLog
    tools: ToolDispatcher
    steps: TurnSteps

    def __init__(self, conversation_id: str, ports: ConversationPortsFactory) -> None:
        self.id = conversation_id
        self.ports: ConversationPorts = ports()
        self.store = self.ports.store
        self._bound = False
        self._published = 0  # the last stored event subscribers have been handed
        try:
            self._bind()
        except NotFound:
            pass  # reserved: its conversation is written when its id is handed out
        self._subscribers: set[asyncio.Queue[JsonObject]] = set()
        self._partial: dict[str, list[str]] = {}  # each turn's streamed tokens not yet stored
        self._work: dict[str, asyncio.Task[None]] = {}  # each running turn's current step
        self._models: dict[str, ChatModel] = {}  # each model loop's model (one per context)
        self._ended: dict[str, asyncio.Event] = {}  # turns someone waits on
        self._side: set[asyncio.Task[Any]] = set()
        self._last_activity = time.monotonic()
        self._closing = False
        self._started = False
        try:
            # Under Ray an async actor is constructed on its event loop: recover at once, so a
            # restart after a crash resumes (or settles) what was running without waiting for a
            # caller. Built without a loop (tests), the first call starts it.
            asyncio.get_running_loop().call_soon(self._start_in_background)
        except RuntimeError:
            pass

    def _bind(self) -> None:
        """Load the conversation (once): its state, log, tools and steps."""
        conversation = self.store.conversations.get(self.id)
        self.state = ConversationState(conversation)
        self.log = ConversationLog(self.store, self.id, self.publish)
        self._published = self.log.last_seq()
        self.tools = ToolDispatcher(self.ports, conversation)
        self.steps = TurnSteps(self.ports, self.tools, self.publish)
        self._turn_metrics = TurnMetrics(self.ports.metrics)
        self._bound = True

    # ------------------------------------------------------------------ the step

    def _handle(
        self, event: ConversationEvent, guard: PendingWrite | None = None
    ) -> tuple[list[Decision], dict[str, Message]]:
        """Plan ``event``, persist what it writes (``guard`` checks inside that transaction),
        apply it, perform its effects."""
        decisions = plan(self.state, event)
        writer = BatchWriter(self.store, self.id)
        writes = writer.writes_for(decisions)
        if writes:
            # intent first: a failed commit changes nothing
            self.log.commit(utc_now(), [*writes, guard] if guard is not None else writes)
        for decision in decisions:
            apply(self.state, decision)
        for decision in decisions:
            self._perform(decision)
        return decisions, writer.acks

    def _perform(self, decision: Decision) -> None:
        match decision:
            case AssembleContext(turn_id=turn_id, agent_id=agent_id):
                self._spawn(turn_id, self.steps.assemble(turn_id, agent_id))
            case AdoptContext(turn_id=turn_id, setup=setup):
                self._models[turn_id] = self.ports.models.for_profile(
                    setup.profile, self.state.conversation.client_id
                )
            case CallModel(turn_id=turn_id, request=request):
                live = self.state.turns.get(turn_id)
                catalog = live.setup.catalog if live is not None and live.setup else None
                model = self._models[turn_id]
                self._spawn(turn_id, self.steps.call_model(turn_id, model, request, catalog))
            case RunTools(turn_id=turn_id, agent_id=agent_id, plans=plans):
                self._spawn(turn_id, self.steps.run_tools(turn_id, agent_id, plans))
            case ExtractMemories(extraction=extraction):
                self._spawn(extraction.turn_id, self.steps.extract_memories(extraction))
            case CheckOperations(turn_id=turn_id, agent_id=agent_id, operations=operations):
                self._side_step(turn_id, self.steps.check_operations(turn_id, agent_id, operations))
            case StopWork(turn_id=turn_id):
                work = self._work.get(turn_id)
                if work is not None:
                    work.cancel()
            case CompleteTurn(turn_id=turn_id) | FailTurn(turn_id=turn_id):
                self._models.pop(turn_id, None)
                ended = self._ended.pop(turn_id, None)
                if ended is not None:
                    ended.set()
            case SaveConversation(conversation=conversation):
                self.tools.conversation = conversation
            case MarkConversation():
                self.tools.conversation = self.state.conversation
            case (
                Refuse()
                | BeginTurn()
                | QueueTurn()
                | StartTurn()
                | ResumeTurn()
                | ResumeLoop()
                | WaitForOperations()
                | AddUsage()
                | RecordMoves()
                | AppendAgentMessage()
                | AwaitOperations()
                | HoldDelivery()
                | NoteEvent()
                | CloseDangling()
                | SettleOperation()
                | SettleExtraction()
            ):
                pass  # persisted and applied: nothing more to do
            case _:
                assert_never(decision)

    def _spawn(self, turn_id: str, step: Coroutine[Any, Any, ConversationEvent]) -> None:
        """Run the turn's next step; its outcome comes back as an event."""
        task = asyncio.get_running_loop().create_task(self._run_step(turn_id, step))
        self._work[turn_id] = task
        task.add_done_callback(lambda done: self._step_done(turn_id, done))

    def _side_step(self, turn_id: str, step: Coroutine[Any, Any, ConversationEvent]) -> None:
        """A step that runs beside the turn's current one (its event is checked on arrival)."""
        task = asyncio.get_running_loop().create_task(self._run_step(turn_id, step))
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _run_step(self, turn_id: str, step: Coroutine[Any, Any, ConversationEvent]) -> None:
        try:
            event = await step
        except Unavailable as exc:  # the store went away under the step
            event = _store_lost(turn_id, exc)
        except WonderError as exc:
            log.warning("turn %s failed: %s", turn_id, exc.message)
            event = StepFailed(turn_id, exc.message, utc_now())
        except Exception as exc:  # a bug must not leave the turn dangling
            log.exception("turn %s crashed", turn_id)
            event = StepFailed(turn_id, f"internal error: {type(exc).__name__}: {exc}", utc_now())
        try:
            self._handle(event)
        except Unavailable as exc:
            # The store went away before the step's outcome was written (none of it was): the
            # turn fails with a retriable error as soon as the store takes that.
            await self._fail_when_stored(_store_lost(turn_id, exc))
        except Exception:
            # The store refused the outcome's writes: the turn stays active there, and the next
            # incarnation of this actor resumes it. Nothing acknowledged is lost.
            log.exception("turn %s: could not record %s", turn_id, type(event).__name__)

    async def _fail_when_stored(self, failed: StepFailed) -> None:
        log.warning("turn %s: %s; failing it once the store is back", failed.turn_id, failed.reason)

        async def attempt() -> None:
            self._handle(failed)

        try:
            await with_retries(STORE_OUTAGE, attempt)
        except WonderError:
            # Still no store: the turn stays active there and in this incarnation; the next
            # one resumes it (durable turns). Nothing acknowledged is lost.
            log.error("turn %s: no store; left for the next activation", failed.turn_id)

    def _step_done(self, turn_id: str, task: asyncio.Task[None]) -> None:
        if self._work.get(turn_id) is task:
            del self._work[turn_id]
        self._last_activity = time.monotonic()

    # ------------------------------------------------------------------ lifecycle

    def _touch(self) -> None:
        if self._closing:
            raise Hibernating(f"conversation {self.id} is hibernating")
        self._last_activity = time.monotonic()
        self._start()

    def _start(self) -> None:
        """Recover what a previous incarnation left, then watch for idleness (once)."""
        if self._started:
            return
        if not self._bound:
            self._bind()
        recovered = self._recovered()
        self._measure_acknowledged(recovered)
        self._handle(recovered)
        self._started = True
        loop = asyncio.get_running_loop()
        for background in (self._watch_idle(), self._prewarm_model()):
            task = loop.create_task(background)
            self._side.add(task)
            task.add_done_callback(self._side.discard)

    def _start_in_background(self) -> None:
        if not self._bound:
            return  # reserved: nothing to recover before the first call
        try:
            self._start()
        except Exception:  # the first call tries again
            log.exception("conversation %s could not recover yet", self.id)

    def _recovered(self) -> Recovered:
        """What a previous incarnation left active (see ``planning._recovered``): each active
        turn with its operations, and for a turn cut mid-loop its moves, the last tool calls it
        started and how often it was resumed before (see ``resumption``)."""
        turns = []
        active = self.store.turns.list(self.id, status=TurnStatus.ACTIVE)
        mid_loop = [t for t in active if t.started_at is not None and not t.awaiting_operations]
        started: dict[str, StartedTools] = {}
        resumes: dict[str, int] = {}
        if mid_loop:
            for event in self.store.events.list_of_types(self.id, RECOVERY_EVENTS):
                turn_id = str(event.payload.get("turn_id"))
                if event.type == "tools.started":
                    started[turn_id] = started_tools(event.payload)
                else:
                    resumes[turn_id] = resumes.get(turn_id, 0) + 1
        at = utc_now()
        for turn in active:
            ops = tuple(
                self.store.async_operations.list(self.id, turn_id=turn.id, statuses=WAITING)
            )
            if turn in mid_loop:
                moves = tuple(self.store.moves.list(turn.id))
                turns.append(
                    RecoveredTurn(turn, ops, moves, started.get(turn.id), resumes.get(turn.id, 0))
                )
            elif turn.started_at is None:  # not started yet: the turn quotas may refuse it
                admission = self.ports.quotas.admission(
                    self.state.conversation.client_id, turn.user_id, at, excluding=turn.id
                )
                turns.append(RecoveredTurn(turn, ops, admission=admission))
            else:
                turns.append(RecoveredTurn(turn, ops))
        extractions = tuple(self.store.pending_extractions.list(self.id))
        return Recovered(tuple(turns), at, extractions)

    def _measure_acknowledged(self, recovered: Recovered) -> None:
        """Show the turn metrics the ``turn.started`` of turns acknowledged in the store before
        this actor bound (``intake``): it never publishes those events, and no actor started
        these turns, so nobody measured their start (their latency runs from it)."""
        waiting = {r.turn.id for r in recovered.turns if r.turn.started_at is None}
        if not waiting:
            return
        for event in self.store.events.list_of_types(self.id, ("turn.started",)):
            if event.seq <= self._published and event.payload.get("turn_id") in waiting:
                self._turn_metrics.observe(event_dict(event), utc_now())

    async def _prewarm_model(self) -> None:
        """Get the agent's model ready now, not on the first turn (≈ 0.5 s of imports)."""
        try:
            profile = self.steps.load_setup(None).profile
            await asyncio.to_thread(self.ports.models.prewarm, profile)
        except Exception:  # an optimisation only: the first turn gets it ready otherwise
            log.debug("model prewarm for %s skipped", self.id, exc_info=True)

    def is_idle(self) -> bool:
        if not self._bound:
            return not self._work and not self._subscribers
        live = self.state.turns or self.state.extracting
        return not self._work and not self._subscribers and not live

    async def status(self) -> JsonObject:
        self._touch()
        return {
            "conversation_id": self.id,
            "active_turns": sorted(self.state.running),
            "queued_turns": list(self.state.queue),
            "live_turns": {t.turn_id: t.phase.value for t in self.state.turns.values()},
            "subscribers": len(self._subscribers),
            "idle_s": time.monotonic() - self._last_activity,
            "pid": os.getpid(),
            "last_seq": self.log.last_seq(),
            "policy": self.state.conversation.concurrency_policy.value,
        }

    async def try_hibernate(self) -> bool:
        """Agree to be evicted if idle; everything is already persisted, so nothing to flush."""
        if not self.is_idle():
            return False
        self._closing = True
        return True

    async def _watch_idle(self) -> None:
        ttl = self.ports.settings.conversation_idle_ttl_s
        while not self._closing:
            await asyncio.sleep(min(max(ttl / 4, 0.05), 5.0))
            if time.monotonic() - self._last_activity >= ttl and self.is_idle():
                await self.ports.residency.release_idle(self.id)

    async def shutdown(self, reason: str = "conversation deleted") -> JsonObject:
        """Stop everything running here (before the conversation is deleted); refuse new work."""
        cancelled = sorted(self.state.turns) if self._bound else []
        for turn_id in cancelled:
            await self.cancel_turn(turn_id, reason)
        extractions = [self._work[t] for t in self.state.extracting if t in self._work]
        for work in extractions:  # nothing left to extract memories for
            work.cancel()
        await asyncio.gather(*extractions, return_exceptions=True)
        self._closing = True
        return {"conversation_id": self.id, "cancelled_turns": cancelled}

    # ------------------------------------------------------------------ entry points

    async def post_message(
        self,
        content: str,
        author: str,
        *,
        message_id: str | None = None,
        source: MessageSource = "human",
        reply_to_message_id: str | None = None,
        agent_id: str | None = None,
    ) -> MessageAck:
        """Persist a user message and its turn, start (or queue) the turn, acknowledge the ids.

        ``agent_id`` (or an ``@agent`` mention of a participant) picks which agent answers.
        """
        self._touch()
        if message_id is not None:
            existing = existing_ack(self.store, self.id, message_id)
            if existing is not None:
                return self._picked_up(existing)
        for attempt in range(PARENT_READS):
            event = self._received(
                content,
                author,
                UserCaller(user_id=author),
                source,
                reply_to_message_id,
                message_id,
                agent_id,
                policy_applies=True,
            )
            # A turn the caller acknowledged in the store meanwhile (``intake``) becomes the
            # parent: read it again. The last read is kept whatever it finds (a fork in the
            # thread tree rather than a refused message).
            guarded = reply_to_message_id is None and attempt < PARENT_READS - 1
            try:
                decisions, acks = self._handle(event, self._follows(event) if guarded else None)
            except ParentMoved:
                continue
            except IntegrityError:
                # Acknowledged meanwhile by the caller (``intake``), while this actor was starting.
                existing = existing_ack(self.store, self.id, event.message_id)
                if existing is None:
                    raise
                return self._picked_up(existing)
            break
        raise_refusal(decisions)
        stored = acks[event.turn_id]
        return MessageAck(
            conversation_id=self.id,
            turn_id=event.turn_id,
            message_id=stored.id,
            seq=stored.seq,
            queued=event.turn_id in self.state.queue,
        )

    def _follows(self, event: MessageReceived) -> PendingWrite:
        """A check inside the transaction storing ``event``'s turn: its parent is still the
        conversation's latest turn."""

        def check(conn: Connection, _events: list[Event]) -> None:
            if not follows_latest(self.store, self.id, event.turn_id, event.parent_turn_id, conn):
                raise ParentMoved(event.turn_id)

        return PendingWrite([], check)

    def _picked_up(self, ack: MessageAck) -> MessageAck:
        """A message already stored: a retry, or one acknowledged while this actor was starting
        (``intake``), whose turn this actor now starts (or queues, by the policy)."""
        turn = self.store.turns.get(ack.turn_id)
        if turn.id not in self.state.turns and turn.started_at is None:
            self._handle(TurnRequested(turn, utc_now(), policy_applies=True))
        self._catch_up()
        return ack.model_copy(update={"queued": ack.turn_id in self.state.queue})

    def _received(
        self,
        content: str,
        author: str,
        caller: Caller,
        source: MessageSource,
        reply_to_message_id: str | None,
        message_id: str | None,
        agent_id: str | None,
        *,
        policy_applies: bool,
    ) -> MessageReceived:
        parent_turn_id = parent_turn(self.store, self.id, reply_to_message_id)
        return MessageReceived(
            turn_id=new_id_after("turn", parent_turn_id),
            message_id=message_id or new_id("msg"),
            content=content,
            author=author,
            caller=caller,
            source=source,
            requested_agent_id=agent_id,
            reply_to_message_id=reply_to_message_id,
            parent_turn_id=parent_turn_id,
            policy_applies=policy_applies,
            at=utc_now(),
        )

    async def start_agent_call(
        self,
        input: str,
        caller: Caller,
        mode: InvocationMode = "delegate",
        agent_id: str | None = None,
        message_id: str | None = None,
    ) -> AgentAnswer:
        """Run one turn for another agent or a workflow and return its answer: by ``agent_id``
        (default: the primary agent), which first joins the conversation when ``loop_in``.

        A call repeated with the ``message_id`` of one already stored (a workflow coordinator
        resumed after a crash) re-attaches to the turn that message started.
        """
        self._touch()
        existing = existing_ack(self.store, self.id, message_id) if message_id else None
        if existing is not None:
            return await self._answer(existing.turn_id)
        if mode == "loop_in" and agent_id is not None:
            joined, _acks = self._handle(ParticipantAdded(agent_id, utc_now()))
            raise_refusal(joined)
        author, source = _author(caller)
        event = self._received(
            input,
            author,
            caller,
            source,
            None,
            message_id,
            agent_id or self.state.conversation.agent_id,
            policy_applies=False,
        )
        quotas, client_id = self.ports.quotas, self.state.conversation.client_id
        admission = quotas.admission(client_id, quotas.acting_user(client_id, caller), event.at)
        decisions, _acks = self._handle(replace(event, admission=admission))
        raise_refusal(decisions)
        return await self._answer(event.turn_id)

    async def run_agent_turn(self, turn_id: str) -> AgentAnswer:
        """Run a turn written by whoever created this conversation (a delegated child's first)."""
        self._touch()
        if turn_id not in self.state.turns:
            turn = self.store.turns.get(turn_id)
            if turn.conversation_id != self.id:
                raise NotFound(f"turn {turn_id} not found in this conversation")
            at = utc_now()
            client_id = self.state.conversation.client_id
            admission = self.ports.quotas.admission(client_id, turn.user_id, at, excluding=turn.id)
            self._handle(TurnRequested(turn, at, admission=admission))
        return await self._answer(turn_id)

    async def _answer(self, turn_id: str) -> AgentAnswer:
        await self._until_ended(turn_id, None)
        done = self.store.turns.get(turn_id)
        answers = [
            m
            for m in self.store.messages.list(self.id, turn_ids=[turn_id])
            if m.role is MessageRole.AGENT
        ]
        return AgentAnswer(
            conversation_id=self.id,
            turn_id=turn_id,
            status=done.status,
            failure_reason=done.failure_reason,
            failure_code=done.failure_code,
            content=answers[-1].content if answers else "",
        )

    async def _until_ended(self, turn_id: str, timeout_s: float | None) -> None:
        """Wait until ``turn_id`` is no longer live here (or the timeout passes)."""
        if turn_id not in self.state.turns and not self._on_its_way(turn_id):
            return
        ended = self._ended.setdefault(turn_id, asyncio.Event())
        try:
            await asyncio.wait_for(ended.wait(), timeout_s)
        except TimeoutError:
            pass

    def _on_its_way(self, turn_id: str) -> bool:
        """Whether ``turn_id`` is this conversation's, acknowledged in the store and not ended,
        though not started here: its message was acknowledged without waiting for this actor and
        the call that starts it here is still on its way (it is retried until it arrives), so a
        wait for the turn waits for that, not for nothing (tests/cluster/test_head_restart.py)."""
        try:
            turn = self.store.turns.get(turn_id)
        except NotFound:
            return False
        return turn.conversation_id == self.id and turn.status is TurnStatus.ACTIVE

    async def deliver_operation(self, op_id: str) -> bool:
        """An async operation finished: answer with its result on its turn (exactly once)."""
        self._touch()
        op = self.store.async_operations.get(op_id)
        if op.conversation_id != self.id:
            raise NotFound(f"operation {op_id} not found in this conversation")
        if op.status is not OperationStatus.COMPLETED:
            return False
        self._handle(OperationCompleted(op, utc_now()))
        return True

    async def cancel_turn(self, turn_id: str, reason: str = "cancelled") -> TurnOutcome:
        """Stop a turn: its open tool calls get an error result and it fails with ``reason``."""
        self._touch()
        turn = self.store.turns.get(turn_id)
        if turn.conversation_id != self.id:
            raise NotFound(f"turn {turn_id} not found in this conversation")
        work = self._work.get(turn_id)
        self._handle(CancelRequested(turn_id, reason, utc_now()))
        if work is not None:
            await asyncio.gather(work, return_exceptions=True)
        return self._outcome(turn_id)

    async def wait_for_turn(self, turn_id: str, timeout_s: float = 300.0) -> TurnOutcome:
        """Wait until ``turn_id`` stops running here; returns its stored status."""
        self._touch()
        await self._until_ended(turn_id, timeout_s)
        return self._outcome(turn_id)

    def _outcome(self, turn_id: str) -> TurnOutcome:
        turn = self.store.turns.get(turn_id)
        if turn.conversation_id != self.id:
            raise NotFound(f"turn {turn_id} not found in this conversation")
        return TurnOutcome(
            turn_id=turn.id,
            status=turn.status,
            failure_reason=turn.failure_reason,
            awaiting_operations=turn.awaiting_operations,
        )

    async def add_participant(self, agent_id: str) -> ParticipantChange:
        """Loop an agent in: it sees this conversation's history and answers when addressed."""
        self._touch()
        decisions, _acks = self._handle(ParticipantAdded(agent_id, utc_now()))
        return ParticipantChange(agent_id=agent_id, joined=bool(decisions))

    async def remove_participant(self, agent_id: str) -> ParticipantChange:
        self._touch()
        decisions, _acks = self._handle(ParticipantRemoved(agent_id, utc_now()))
        raise_refusal(decisions)
        return ParticipantChange(agent_id=agent_id, left=True)

    async def set_policy(self, policy: ConcurrencyPolicy) -> ConversationChange:
        self._touch()
        self._handle(PolicySet(ConcurrencyPolicy(policy), utc_now()))
        return self._change()

    async def complete(self) -> ConversationChange:
        """Mark the conversation completed (only by explicit user action)."""
        self._touch()
        self._handle(CompletionRequested(utc_now()))
        return self._change()

    def _change(self) -> ConversationChange:
        conversation = self.state.conversation
        return ConversationChange(
            conversation_id=self.id,
            status=conversation.status,
            concurrency_policy=conversation.concurrency_policy,
        )

    async def events(self, after_seq: int = 0) -> AsyncIterator[JsonObject]:
        """Stored events after ``after_seq``, the tokens of model calls in flight so far, then
        live events (token deltas have ``seq`` None). A subscriber that arrives mid-reply (a
        reconnect, or a message acknowledged before its actor started) misses no token."""
        self._touch()
        queue: asyncio.Queue[JsonObject] = asyncio.Queue()
        self._subscribers.add(queue)
        # Read together with registering (no await between): what was published before is in
        # the store or in these partial replies; what comes after arrives through the queue.
        stored = self.store.events.list(self.id, after_seq)
        in_flight = {turn_id: "".join(deltas) for turn_id, deltas in self._partial.items()}
        try:
            last = after_seq
            for event in stored:
                last = event.seq
                yield event_dict(event)
            for turn_id, text in in_flight.items():
                if text:
                    yield token_event(self.id, turn_id, text)
            held: JsonObject | None = None
            while True:
                item = held if held is not None else await queue.get()
                item, held = coalesce_tokens(item, queue)
                seq = item.get("seq")
                if seq is not None:
                    if seq <= last:
                        continue
                    if seq > last + 1:  # another writer's events: from the store, in order
                        for missed in self.store.events.list(self.id, last, limit=seq - last - 1):
                            yield event_dict(missed)
                    last = seq
                yield item
        finally:
            self._subscribers.discard(queue)
            self._last_activity = time.monotonic()

    def publish(self, event: JsonObject) -> None:
        self._turn_metrics.observe(event, utc_now())
        seq = event.get("seq")
        if seq is not None:
            self._published = max(self._published, int(seq))
        self._remember_partial(event)
        for queue in self._subscribers:
            queue.put_nowait(event)

    def _remember_partial(self, event: JsonObject) -> None:
        """Keep the tokens of each model call in flight until its words are stored (a move or a
        message) or the call starts over, for subscribers that arrive mid-reply."""
        match event.get("type"):
            case "token":
                self._partial.setdefault(str(event.get("turn_id")), []).append(
                    str(event.get("delta") or "")
                )
            case "llm.retry" | "turn.completed" | "turn.failed":
                self._partial.pop(str(event.get("turn_id")), None)
            case "message" | "move":
                stored = event.get("message") or event.get("move") or {}
                self._partial.pop(str(stored.get("turn_id")), None)
            case _:
                pass

    def _catch_up(self) -> None:
        """Publish what another writer of this conversation stored (a message acknowledged
        while this actor started, a delivery failure the runner recorded)."""
        for event in self.store.events.list(self.id, self._published):
            self.publish(event_dict(event))


def _store_lost(turn_id: str, exc: Unavailable) -> StepFailed:
    """The turn's failure when the store went away mid-turn: retriable (ask again)."""
    error = ToolError(code=ErrorCode.UNAVAILABLE, message=exc.message, retriable=True)
    return StepFailed(turn_id, f"store unavailable: {exc.message}", utc_now(), error)


def _author(caller: Caller) -> tuple[str, MessageSource]:
    """Who speaks for a caller, and where its input comes from."""
    match caller:
        case AgentCaller(agent_id=agent_id):
            return agent_id, "agent"
        case WorkflowCaller(run_id=run_id):
            return run_id, "trigger"
        case UserCaller(user_id=user_id):
            return user_id, "human"
        case _:
            assert_never(caller)
