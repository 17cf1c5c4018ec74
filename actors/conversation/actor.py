"""The Conversation actor: the thin, effectful shell around the state machine in ``planning``.

One instance per conversation, named ``conversation:<id>``, created through the directory
(``actors.conversation.directory``), which also evicts idle ones. Every entry point and every step
outcome becomes an event, handled the same way (``_handle``): plan → persist what the decisions
write (one transaction) → apply them to the state → perform their effects, whose outcomes come back
as the next events. Its state lives in the store, so a new incarnation reloads it: the first call
hands ``Recovered`` to planning, which decides what a crash left behind (see ``planning``).
Collaborators arrive as ports at construction (``ConversationPorts``); nothing here reaches up.

It holds its conversation's log while resident (the writer lease, taken when it binds, given back
when it hibernates: ``actors.conversation.log``) and publishes what it appends, and the token
deltas of its model calls, to the conversation's listeners (``ports.listeners``); it serves no
subscriber itself, so listeners never keep it resident. When its last turn ends it tells the
directory (``note_idle``): at the resident cap it is among the first to make room.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, assert_never

from sqlalchemy.exc import IntegrityError

from actors.conversation.approvals import recorded_waits
from actors.conversation.domain import (
    AddUsage,
    AdoptContext,
    AppendAgentMessage,
    ApprovalDecided,
    ApprovalRequest,
    ApprovalTimedOut,
    ApprovalVerdict,
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
    MemoriesExtracted,
    MemoryExtractionFailed,
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
    RequestApprovals,
    ResumeLoop,
    ResumeTurn,
    RunTools,
    SaveConversation,
    SettleApproval,
    SettleExtraction,
    SettleOperation,
    StartedTools,
    StartTurn,
    StepFailed,
    StopWork,
    TurnRequested,
    WaitForOperations,
)
from actors.conversation.extraction_pacing import CheckAt, RunNow, Waiting, next_extraction
from actors.conversation.folding import apply
from actors.conversation.intake import existing_ack, parent_turn, raise_refusal
from actors.conversation.log import (
    ConversationLog,
    Owner,
    PendingWrite,
    WriterFenced,
    event_dict,
)
from actors.conversation.planning import plan
from actors.conversation.ports import ConversationPorts, ConversationPortsFactory
from actors.conversation.records import WAITING, BatchWriter
from actors.conversation.resumption import RECOVERY_EVENTS, started_tools
from actors.conversation.steps import TurnSteps
from actors.conversation.tool_dispatch import ToolDispatcher
from actors.conversation.turn_traces import TurnTraces
from core.approvals import EVENT_TYPES as APPROVAL_EVENTS
from core.approvals import ApprovalLog, ApprovalOutcome
from core.approvals import Decision as ApprovalChoice
from core.domain import (
    AgentCaller,
    Caller,
    ConcurrencyPolicy,
    Message,
    MessageRole,
    MessageSource,
    OperationStatus,
    PendingExtraction,
    ToolError,
    TurnStatus,
    UserCaller,
    WorkflowCaller,
)
from core.errors import (
    Conflict,
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
from core.tracing import current_traceparent

log = logging.getLogger("wonder.conversation")

SETTLE_BATCH_S = 0.25  # settled memory extractions are stored together this long after the first


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
        began = time.perf_counter()
        self._constructed_at = time.time()  # when this process began constructing the actor
        self.id = conversation_id
        self.ports: ConversationPorts = ports()
        self.store = self.ports.store
        self._bound = False
        self._epoch = 0  # the writer lease this incarnation holds (0: none yet)
        self._published = 0  # the last stored event this incarnation published
        try:
            self._bind()
        except NotFound:
            pass  # reserved: its conversation is written when its id is handed out
        self._work: dict[str, asyncio.Task[None]] = {}  # each running turn's current step
        self._models: dict[str, ChatModel] = {}  # each model loop's model (one per context)
        self._ended: dict[str, asyncio.Event] = {}  # turns someone waits on
        self._side: set[asyncio.Task[Any]] = set()
        self._held: list[PendingWrite] = []  # settled extractions not stored yet (``_hold``)
        self._held_flush: asyncio.TimerHandle | None = None
        # Completed turns' extractions waiting for a quiet moment (``extraction_pacing``), the
        # one of them running, and when the conversation's turns last did something.
        self._waiting: dict[str, tuple[PendingExtraction, float]] = {}
        self._extraction: asyncio.Task[None] | None = None
        self._pace_timer: asyncio.TimerHandle | None = None
        self._turn_activity = time.monotonic()
        # Each waiting approval's timeout, by turn, then by approval id.
        self._timers: dict[str, dict[str, asyncio.Task[None]]] = {}
        self._last_activity = time.monotonic()
        self._closing = False
        self._noted_idle = False
        self._started = False
        self._init_s = time.perf_counter() - began  # ports and binding (reported by status)
        try:
            # Under Ray an async actor is constructed on its event loop: recover at once, so a
            # restart after a crash resumes (or settles) what was running without waiting for a
            # caller. Built without a loop (tests), the first call starts it.
            asyncio.get_running_loop().call_soon(self._start_in_background)
        except RuntimeError:
            pass

    def _bind(self) -> None:
        """Load the conversation (once) and take its log: its state, log, tools and steps."""
        self.store.conversations.get(self.id)  # NotFound: reserved, not created yet
        self._epoch = self.store.writers.take(self.id, f"actor:{os.getpid()}", utc_now())
        # Read after taking the log: whatever a guest wrote before is in it, none after.
        conversation = self.store.conversations.get(self.id)
        self.state = ConversationState(conversation)
        self.log = ConversationLog(self.store, self.id, self.publish, Owner(self._epoch))
        self._published = self.log.last_seq()
        self.tools = ToolDispatcher(self.ports, conversation)
        self.steps = TurnSteps(self.ports, self.tools, self.publish)
        self.traces = TurnTraces(self.store, self.id, conversation.client_id)
        self._turn_metrics = TurnMetrics(self.ports.metrics)
        self._bound = True

    # ------------------------------------------------------------------ the step

    def _handle(self, event: ConversationEvent) -> tuple[list[Decision], dict[str, Message]]:
        """Plan ``event``, persist what it writes (one transaction), apply it, perform its
        effects."""
        if not isinstance(event, MemoriesExtracted | MemoryExtractionFailed):
            self._turn_activity = time.monotonic()  # a turn's work: extractions wait for quiet
        decisions = plan(self.state, event)
        runs = {t.turn_id: t.context_run_id for t in self.state.turns.values() if t.context_run_id}
        writer = BatchWriter(self.store, self.id, runs)
        writes = writer.writes_for(decisions)
        if writes and all(isinstance(d, SettleExtraction) for d in decisions):
            self._hold(writes)
        elif writes:
            self._commit(writes)  # intent first: a failed commit changes nothing
        for decision in decisions:
            apply(self.state, decision)
        for decision in decisions:
            self._perform(decision)
        return decisions, writer.acks

    def _commit(self, writes: list[PendingWrite]) -> None:
        try:
            self.log.commit(utc_now(), writes)
        except WriterFenced:
            # A newer incarnation holds the log: this one is a leftover and takes no more.
            log.error("conversation %s: another incarnation holds the log", self.id)
            self._closing = True
            raise

    def _hold(self, writes: list[PendingWrite]) -> None:
        """Settled memory extractions are stored together, ``SETTLE_BATCH_S`` after the first
        (one transaction for all, not one each beside the next turns). Until then they are
        pending in the store: an actor that dies meanwhile leaves them to its next incarnation,
        which runs them again, as after a crash mid-extraction. The actor is not idle while it
        holds any."""
        self._held.extend(writes)
        if self._held_flush is None:
            loop = asyncio.get_running_loop()
            self._held_flush = loop.call_later(SETTLE_BATCH_S, self._flush_held)

    def _flush_held(self) -> None:
        self._held_flush = None
        held, self._held = self._held, []
        if not held:
            return
        try:
            self._commit(held)
        except Exception:  # still pending in the store: a later incarnation settles them
            log.exception("conversation %s: settled extractions not stored", self.id)
        self._note_if_idle()

    def _perform(self, decision: Decision) -> None:
        match decision:
            case AssembleContext(turn_id=turn_id, agent_id=agent_id):
                self._spawn(turn_id, self.steps.assemble(turn_id, agent_id))
            case AdoptContext(turn_id=turn_id, setup=setup):
                self._models[turn_id] = self.ports.models.for_profile(
                    setup.profile, self.state.conversation.client_id
                )
                self.traces.adopt(turn_id, setup)
            case CallModel(turn_id=turn_id, request=request, profile=profile):
                live = self.state.turns.get(turn_id)
                catalog = live.setup.catalog if live is not None and live.setup else None
                model = self._models[turn_id]
                scope = self.traces.call_scope(turn_id, live, profile, decision.moves_made + 1)
                call = self.steps.call_model(turn_id, model, request, catalog, scope=scope)
                self._spawn(turn_id, call)
            case RunTools(turn_id=turn_id, agent_id=agent_id, plans=plans):
                self._spawn(turn_id, self.steps.run_tools(turn_id, agent_id, plans))
            case ExtractMemories(extraction=extraction):
                self._extract_when_quiet(extraction)
            case CheckOperations(turn_id=turn_id, agent_id=agent_id, operations=operations):
                self._side_step(turn_id, self.steps.check_operations(turn_id, agent_id, operations))
            case StopWork(turn_id=turn_id):
                work = self._work.get(turn_id)
                if work is not None:
                    work.cancel()
            case RequestApprovals() | SettleApproval():
                self._time_approvals(decision)
            case CompleteTurn(turn_id=turn_id) | FailTurn(turn_id=turn_id):
                self._stop_timers(turn_id)
                self._models.pop(turn_id, None)
                self.traces.ended(decision)
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
        self._noted_idle = False
        task = asyncio.get_running_loop().create_task(self._run_step(turn_id, step))
        self._work[turn_id] = task
        task.add_done_callback(lambda done: self._step_done(turn_id, done))

    def _extract_when_quiet(self, extraction: PendingExtraction) -> None:
        """Run a completed turn's memory extraction once its conversation is quiet
        (``extraction_pacing``); at once when ``extraction_quiet_s`` is 0."""
        if self.ports.settings.extraction_quiet_s == 0:
            self._spawn(extraction.turn_id, self.steps.extract_memories(extraction))
            return
        self._waiting[extraction.turn_id] = (extraction, time.monotonic())
        self._pace_extractions()

    def _pace_extractions(self) -> None:
        """Start the oldest waiting extraction if the conversation is quiet (or it waited too
        long), else ask again when that may be. One runs at a time."""
        if self._pace_timer is not None:
            self._pace_timer.cancel()
            self._pace_timer = None
        if self._extraction is not None or self._closing:
            return
        busy = any(turn_id in self.state.turns for turn_id in self._work)
        now = time.monotonic()
        settings = self.ports.settings
        pace = next_extraction(
            [Waiting(turn_id, since) for turn_id, (_, since) in self._waiting.items()],
            now=now,
            quiet_since=None if busy else self._turn_activity,
            quiet_s=settings.extraction_quiet_s,
            max_wait_s=settings.extraction_max_wait_s,
        )
        match pace:
            case RunNow(turn_id=turn_id):
                extraction, _ = self._waiting.pop(turn_id)
                self._spawn(turn_id, self.steps.extract_memories(extraction))
                self._extraction = self._work[turn_id]
                self._extraction.add_done_callback(self._extraction_done)
            case CheckAt(at=at):
                loop = asyncio.get_running_loop()
                self._pace_timer = loop.call_later(at - now, self._pace_extractions)
            case None:
                pass
            case _:
                assert_never(pace)

    def _extraction_done(self, _task: asyncio.Task[None]) -> None:
        self._extraction = None
        self._pace_extractions()

    def _time_approvals(self, decision: RequestApprovals | SettleApproval) -> None:
        """Time each held call that waits (``ApprovalTimedOut`` when its time is up); a decided
        one's timer stops."""
        timers = self._timers.setdefault(decision.turn_id, {})
        match decision:
            case RequestApprovals(wait=wait):
                for request in wait.pending:
                    if request.approval_id not in timers:
                        timers[request.approval_id] = asyncio.get_running_loop().create_task(
                            self._expire(request)
                        )
            case SettleApproval(verdict=verdict):
                timer = timers.pop(verdict.approval_id, None)
                if timer is not None and timer is not asyncio.current_task():
                    timer.cancel()
            case _:
                assert_never(decision)

    def _stop_timers(self, turn_id: str) -> None:
        for timer in self._timers.pop(turn_id, {}).values():
            timer.cancel()

    async def _expire(self, request: ApprovalRequest) -> None:
        await asyncio.sleep(max(0.0, (request.expires_at - utc_now()).total_seconds()))
        try:
            self._handle(ApprovalTimedOut(request.approval_id, utc_now()))
        except Exception:  # the next incarnation finds it expired and decides it then
            log.exception("approval %s: could not record its timeout", request.approval_id)

    def _side_step(self, turn_id: str, step: Coroutine[Any, Any, ConversationEvent]) -> None:
        """A step that runs beside the turn's current one (its event is checked on arrival)."""
        task = asyncio.get_running_loop().create_task(self._run_step(turn_id, step))
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _run_step(self, turn_id: str, step: Coroutine[Any, Any, ConversationEvent]) -> None:
        try:
            # The turn's root span is the step's parent.
            with self.traces.step(turn_id, live=turn_id in self.state.turns):
                event = await step
        except Unavailable as exc:  # the store went away under the step
            event = _store_lost(turn_id, exc)
        except WonderError as exc:
            log.warning("turn %s failed: %s", turn_id, exc.message)
            # Its code and whether asking again may help go with the turn's failure.
            event = StepFailed(turn_id, exc.message, utc_now(), ToolError.of(exc))
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
        if self._waiting:
            self._pace_extractions()  # a turn's step ended: quiet may begin now
        self._note_if_idle()

    def _note_if_idle(self) -> None:
        if not self._noted_idle and not self._closing and self.is_idle():
            self._noted_idle = True  # once per stretch of work
            self.ports.residency.note_idle(self.id)

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
        self._announce_tail()
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
        waits = {}
        if mid_loop:
            approvals = self.store.events.list_of_types(self.id, APPROVAL_EVENTS)
            waits = recorded_waits(ApprovalLog(approvals))
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
                    RecoveredTurn(
                        turn,
                        ops,
                        moves,
                        started.get(turn.id),
                        resumes.get(turn.id, 0),
                        approval=waits.get(turn.id),
                    )
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
        """Nothing to do: no step running, no live turn, no memory extraction (listeners do not
        count: they follow the conversation without this actor)."""
        if not self._bound:
            return not self._work
        live = self.state.turns or self.state.extracting or self._held
        return not self._work and not live

    async def status(self) -> JsonObject:
        self._touch()
        return {
            "conversation_id": self.id,
            "active_turns": sorted(self.state.running),
            "queued_turns": list(self.state.queue),
            "live_turns": {t.turn_id: t.phase.value for t in self.state.turns.values()},
            "extracting": sorted(self.state.extracting),  # waiting for quiet, or running
            "writer_epoch": self._epoch,
            "init_ms": round(self._init_s * 1000, 1),
            "constructed_at": self._constructed_at,
            "idle_s": time.monotonic() - self._last_activity,
            "pid": os.getpid(),
            "last_seq": self.log.last_seq(),
            "policy": self.state.conversation.concurrency_policy.value,
        }

    async def try_hibernate(self) -> bool:
        """Agree to be evicted if idle; everything is already persisted, so nothing to flush but
        the log's lease, given back so that writers without the actor may append again."""
        if not self.is_idle():
            return False
        self._closing = True
        if self._bound:
            try:
                self.store.writers.release(self.id, self._epoch, utc_now())
            except WonderError as exc:  # the next incarnation takes it over anyway
                log.warning("conversation %s kept its lease: %s", self.id, exc.message)
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
        self._waiting.clear()  # first: an extraction cancelled below starts no other
        if self._pace_timer is not None:
            self._pace_timer.cancel()
            self._pace_timer = None
        extractions = [self._work[t] for t in self.state.extracting if t in self._work]
        for work in extractions:  # nothing left to extract memories for
            work.cancel()
        await asyncio.gather(*extractions, return_exceptions=True)
        if self._held_flush is not None:  # settled extractions of turns about to be deleted
            self._held_flush.cancel()
            self._held_flush = None
        self._held.clear()
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
        first_send: bool = False,
    ) -> MessageAck:
        """Persist a user message and its turn, start (or queue) the turn, acknowledge the ids.

        ``agent_id`` (or an ``@agent`` mention of a participant) picks which agent answers.
        A ``message_id`` stored already is a retry: its ack again. ``first_send``: the caller
        made ``message_id`` up for this call and sends it for the first time, so nothing can
        have stored it (no store read; a duplicate would still fail the commit's unique key and
        be answered as a retry).
        """
        self._touch()
        if message_id is not None and not first_send:
            existing = existing_ack(self.store, self.id, message_id)
            if existing is not None:
                return self._picked_up(existing)
        # The log is this actor's while it is resident (no other writer can store a turn
        # between reading the parent and storing this one).
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
        try:
            decisions, acks = self._handle(event)
        except IntegrityError:
            # Stored meanwhile with the same id (a retried call that raced its first attempt).
            existing = existing_ack(self.store, self.id, event.message_id)
            if existing is None:
                raise
            return self._picked_up(existing)
        raise_refusal(decisions)
        stored = acks[event.turn_id]
        return MessageAck(
            conversation_id=self.id,
            turn_id=event.turn_id,
            message_id=stored.id,
            seq=stored.seq,
            queued=event.turn_id in self.state.queue,
        )

    def _picked_up(self, ack: MessageAck) -> MessageAck:
        """A message already stored: a retry, or one acknowledged while this actor was starting
        (``intake``), whose turn this actor now starts (or queues, by the policy)."""
        turn = self.store.turns.get(ack.turn_id)
        if turn.id not in self.state.turns and turn.started_at is None:
            self._handle(TurnRequested(turn, utc_now(), policy_applies=True))
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
        traceparent: str | None = None,
    ) -> AgentAnswer:
        """Run one turn for another agent or a workflow and return its answer: by ``agent_id``
        (default: the primary agent), which first joins the conversation when ``loop_in``.

        A call repeated with the ``message_id`` of one already stored (a workflow coordinator
        resumed after a crash) re-attaches to the turn that message started. ``traceparent``:
        the caller's span, whose trace the turn joins (``turn_traces``).
        """
        self._touch()
        traceparent = traceparent or current_traceparent()
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
        self.traces.join(event.turn_id, traceparent)  # the caller's trace: a node, an agent
        decisions, _acks = self._handle(replace(event, admission=admission))
        raise_refusal(decisions)
        return await self._answer(event.turn_id)

    async def run_agent_turn(self, turn_id: str, traceparent: str | None = None) -> AgentAnswer:
        """Run a turn written by whoever created this conversation (a delegated child's first),
        in the trace of the caller's span (``traceparent``)."""
        self._touch()
        self.traces.join(turn_id, traceparent or current_traceparent())
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

    async def decide_approval(
        self,
        approval_id: str,
        decision: ApprovalChoice,
        decided_by: str,
        arguments: JsonObject | None = None,
        reason: str | None = None,
    ) -> ApprovalOutcome:
        """A person's decision on a tool call waiting for approval: approve it, run it with
        edited ``arguments``, or deny it. 404: no such call waits; 409: decided already."""
        self._touch()
        await self._until_held(approval_id)
        verdict = ApprovalVerdict(approval_id, decision, decided_by, utc_now(), arguments, reason)
        decisions, _acks = self._handle(ApprovalDecided(verdict))
        for decision_made in decisions:
            match decision_made:
                case Refuse(code=ErrorCode.NOT_FOUND):
                    log_ = ApprovalLog(self.store.events.list_of_types(self.id, APPROVAL_EVENTS))
                    if approval_id in log_.decided:
                        raise Conflict(f"{approval_id} is decided already")
                case SettleApproval(turn_id=turn_id, request=request):
                    ran_with = arguments if decision == "edit" and arguments is not None else {}
                    if decision == "approve":
                        ran_with = request.arguments
                    return ApprovalOutcome(
                        approval_id=approval_id,
                        turn_id=turn_id,
                        tool=request.tool,
                        decision=decision,
                        arguments=ran_with,
                    )
                case _:
                    pass
        raise_refusal(decisions)
        raise NotFound(f"no tool call waits as {approval_id}")

    async def _until_held(self, approval_id: str, timeout_s: float = 60.0) -> None:
        """A restarted turn holds its answer again once its context is assembled again: a
        decision arriving before that waits for it (briefly)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._resuming_with(approval_id):
            await asyncio.sleep(0.05)

    def _resuming_with(self, approval_id: str) -> bool:
        for turn in self.state.turns.values():
            wait = turn.resuming.approving if turn.resuming is not None else None
            if wait is not None and any(r.approval_id == approval_id for r in wait.requests):
                return True
        return False

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

    def publish(self, event: JsonObject) -> None:
        """Hand an event (a durable one after its commit, or a token delta) to the
        conversation's listeners."""
        self._turn_metrics.observe(event, utc_now())
        seq = event.get("seq")
        if seq is not None:
            self._published = max(self._published, int(seq))
        self.ports.listeners.publish(self.id, [event])

    def _announce_tail(self) -> None:
        """Publish the last stored event again: listeners that missed what a former incarnation
        appended just before it died (its publish lost with it) read it from the store now,
        not at their next store poll."""
        if self._published > 0:
            for event in self.store.events.list(self.id, self._published - 1, limit=1):
                self.ports.listeners.publish(self.id, [event_dict(event)])


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
