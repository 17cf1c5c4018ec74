"""Wonder's ports implemented in one process, without Ray: for tests of the actor shells.

The actor classes are plain Python handed their ports at construction, so a test can run real
Conversation actors (and the real async-operations runner and executor) over a real store in this
process. ``InProcessCluster`` is the ``Conversations``, ``Residency`` and ``AsyncOperations`` ports
at once: it keeps one actor per conversation, as the directory does on Ray; its ``workflows`` is
the production ``WorkflowRunService`` over coordinators run in this process
(``InProcessCoordinators``). Only the runtime is replaced; every class it runs is the production
one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from actors.async_operations.runner import AsyncOperationRunner
from actors.conversation.actor import ConversationActor
from actors.conversation.intake import Intake
from actors.conversation.ports import ConversationPorts, ToolPorts
from actors.executor import run_task
from actors.mcp.connections import McpConnections
from actors.workflow_coordinator.actor import WorkflowCoordinator
from actors.workflow_coordinator.ports import CoordinatorPorts
from actors.workflow_coordinator.runs import RunLimits, WorkflowRunService
from cluster.executor_wiring import executor_services
from cluster.models import ServedChatModels
from core.approvals import ApprovalOutcome
from core.approvals import Decision as ApprovalChoice
from core.domain import Caller, ConcurrencyPolicy, TaskDef
from core.event_feed import EventFeed
from core.event_order import PartialReplies
from core.jsontypes import JsonObject
from core.memory import open_memory_service
from core.memory.embedding import HashingEmbedder
from core.memory.service import MemoryService
from core.ports import (
    AgentAnswer,
    ConversationChange,
    InvocationMode,
    Lifecycle,
    MessageAck,
    ParticipantChange,
    TaskContext,
    TaskOutcome,
    TurnOutcome,
)
from core.secret_vault import SecretVault
from core.settings import settings_from_env
from core.store import Store, open_store
from core.turn_quotas import StoredQuotas, default_quota

T = TypeVar("T")


class InProcessTasks:
    """``TaskRunner``: the executor's ``run_task`` in this process."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        return await run_task(task, task_input, context, executor_services(self.settings_env))


class InProcessMemory:
    """``MemoryAccess``: the production ``MemoryService`` over LanceDB and the object store in
    the cluster's data dir, embedding with the deterministic ``HashingEmbedder`` (no model)."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings = settings_from_env(settings_env)
        self._service: MemoryService | None = None
        self._lock = threading.Lock()

    async def service(self) -> MemoryService:
        def opened() -> MemoryService:
            with self._lock:
                if self._service is None:
                    self._service = open_memory_service(self.settings, HashingEmbedder())
                return self._service

        return await asyncio.to_thread(opened)


class InProcessCoordinators:
    """``Coordinators``: the production ``WorkflowCoordinator``, one per run, all on one event
    loop of their own in a thread of this process (as Ray runs an async actor: its own loop,
    whatever loop its callers are on). A coordinator that exits is forgotten, as a named actor
    that exits is."""

    def __init__(self, ports: Callable[[Lifecycle], CoordinatorPorts]) -> None:
        self._ports = ports
        self.live: dict[str, WorkflowCoordinator] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="in-process-coordinators", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Cancel what the coordinators still run and stop their loop."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _on_loop(self, call: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await call()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self._loop))

    def _coordinator(self, run_id: str) -> WorkflowCoordinator:
        """Get or create (call on the coordinators' loop)."""
        if run_id not in self.live:
            self.live[run_id] = WorkflowCoordinator(
                run_id, lambda: self._ports(_Leave(self, run_id))
            )
        return self.live[run_id]

    def lose(self, run_id: str) -> None:
        """Lose the run's coordinator as a kill -9 would: its work stops, nothing more is
        written, and it is gone (the next ``get``/``wait``/``cancel`` of the run revives it)."""
        coordinator = self.live.pop(run_id)

        async def stop() -> None:
            work = [*coordinator._inflight.values(), *coordinator._background]
            for task in work:
                task.cancel()
            await asyncio.gather(*work, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)

    async def launch(self, run_id: str) -> None:
        await self._on_loop(lambda: self._coordinator(run_id).start())

    def is_live(self, run_id: str) -> bool:
        return run_id in self.live

    def revive(self, run_id: str) -> None:
        # Queued on the loop: ``wait`` and ``cancel`` look the coordinator up on the loop too,
        # after this (the loop runs callbacks in order), so they find the revived one.
        self._loop.call_soon_threadsafe(self._coordinator, run_id)

    async def wait(self, run_id: str, timeout_s: float | None) -> None:
        async def wait_on_loop() -> None:
            coordinator = self.live.get(run_id)
            if coordinator is not None:
                await coordinator.wait(timeout_s)

        await self._on_loop(wait_on_loop)

    async def cancel(self, run_id: str, reason: str) -> None:
        async def cancel_on_loop() -> None:
            coordinator = self.live.get(run_id)
            if coordinator is not None:
                await coordinator.cancel(reason)

        await self._on_loop(cancel_on_loop)

    async def reserved_run_id(self) -> str | None:
        return None

    def wake_reserve(self) -> None:
        return None


class _Leave:
    """``Lifecycle`` of one in-process coordinator: leaving forgets it."""

    def __init__(self, coordinators: InProcessCoordinators, run_id: str) -> None:
        self.coordinators = coordinators
        self.run_id = run_id

    def exit(self) -> None:
        self.coordinators.live.pop(self.run_id, None)


class LocalEvents:
    """``EventListeners`` and the feed's ``FeedSource`` in one process (the events hub's part,
    without the hub): what writers publish goes straight to this process's subscriptions.
    ``drop`` publishes are lost on the way, as when their writer dies right after its commit."""

    def __init__(self, store: Store) -> None:
        self.partials = PartialReplies()
        self.feed = EventFeed(store, self)
        self.drop = 0

    def publish(self, conversation_id: str, frames: Sequence[JsonObject]) -> None:
        if self.drop > 0:
            self.drop -= 1
            return
        for frame in frames:
            self.partials.observe(conversation_id, frame)
        self.feed.deliver(conversation_id, list(frames))

    async def watch(self, conversation_id: str) -> list[JsonObject]:
        return self.partials.so_far(conversation_id)

    def unwatch(self, conversation_id: str) -> None:
        return None


class InProcessCluster:
    """Conversation actors, the runner and the executor, all in this process."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env
        self.store = open_store(settings_env)
        self.events = LocalEvents(self.store)
        self.actors: dict[str, ConversationActor] = {}
        self.memory = InProcessMemory(settings_env)
        self.coordinators = InProcessCoordinators(self.coordinator_ports)
        self.workflows = WorkflowRunService(
            self.store, self.coordinators, RunLimits.of(self.store, settings_from_env(settings_env))
        )
        self.tools = ToolPorts(
            store=self.store,
            settings=settings_from_env(settings_env),
            settings_env=settings_env,
            tasks=InProcessTasks(settings_env),
            conversations=self,
            workflows=self.workflows,
            mcp=McpConnections(
                settings_from_env(settings_env),
                SecretVault(self.store, settings_from_env(settings_env)),
            ),
            listeners=self.events,
        )
        self.runner = AsyncOperationRunner(lambda: self.tools)
        self.intake = Intake(self.store, self.events)  # what the gateway's adapter acks with
        # Hand-overs to the runner to lose, as when an actor dies (its node lost) between
        # recording an operation and handing it over.
        self.lost_starts = 0
        self.idle_noted: list[str] = []  # what actors told the directory, in order

    def ports(self) -> ConversationPorts:
        tools = self.tools
        return ConversationPorts(
            store=tools.store,
            settings=tools.settings,
            settings_env=tools.settings_env,
            tasks=tools.tasks,
            conversations=self,
            workflows=tools.workflows,
            mcp=tools.mcp,
            listeners=self.events,
            residency=self,
            operations=self,
            models=ServedChatModels(tools.settings, SecretVault(tools.store, tools.settings)),
            quotas=StoredQuotas(tools.store, defaults=default_quota(tools.settings)),
        )

    def coordinator_ports(self, lifecycle: Lifecycle) -> CoordinatorPorts:
        tools = self.tools
        return CoordinatorPorts(
            store=tools.store,
            settings=tools.settings,
            settings_env=tools.settings_env,
            tasks=tools.tasks,
            conversations=self,
            workflows=self.workflows,
            lifecycle=lifecycle,
        )

    def close(self) -> None:
        self.coordinators.close()

    def actor(self, conversation_id: str) -> ConversationActor:
        if conversation_id not in self.actors:
            self.actors[conversation_id] = ConversationActor(conversation_id, self.ports)
        return self.actors[conversation_id]

    def crash(self, conversation_id: str) -> ConversationActor:
        """Forget the conversation's actor as a kill -9 would (its tasks are cancelled), and
        start a new incarnation of it."""
        old = self.actors.pop(conversation_id)
        timers = [timer for by_id in old._timers.values() for timer in by_id.values()]
        for task in [*old._work.values(), *old._side, *timers]:
            task.cancel()
        return self.actor(conversation_id)

    # ------------------------------------------------------------------ Conversations

    async def reserved_conversation_id(self) -> str | None:
        return None

    async def post_message(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        source: str = "human",
        reply_to_message_id: str | None = None,
        message_id: str | None = None,
        agent_id: str | None = None,
    ) -> MessageAck:
        return await self.actor(conversation_id).post_message(
            content,
            author,
            message_id=message_id,
            source=source,  # type: ignore[arg-type]
            reply_to_message_id=reply_to_message_id,
            agent_id=agent_id,
        )

    async def start_agent_call(
        self,
        conversation_id: str,
        input: str,
        caller: Caller,
        mode: InvocationMode = "delegate",
        agent_id: str | None = None,
        message_id: str | None = None,
    ) -> AgentAnswer:
        return await self.actor(conversation_id).start_agent_call(
            input, caller, mode, agent_id, message_id
        )

    async def run_agent_turn(self, conversation_id: str, turn_id: str) -> AgentAnswer:
        return await self.actor(conversation_id).run_agent_turn(turn_id)

    async def wait_for_turn(
        self, conversation_id: str, turn_id: str, timeout_s: float = 300.0
    ) -> TurnOutcome:
        return await self.actor(conversation_id).wait_for_turn(turn_id, timeout_s)

    async def deliver_operation(self, conversation_id: str, op_id: str) -> bool:
        return await self.actor(conversation_id).deliver_operation(op_id)

    async def cancel_turn(
        self, conversation_id: str, turn_id: str, reason: str = "cancelled"
    ) -> TurnOutcome:
        return await self.actor(conversation_id).cancel_turn(turn_id, reason)

    async def decide_approval(
        self,
        conversation_id: str,
        approval_id: str,
        decision: ApprovalChoice,
        decided_by: str,
        arguments: JsonObject | None = None,
        reason: str | None = None,
    ) -> ApprovalOutcome:
        return await self.actor(conversation_id).decide_approval(
            approval_id, decision, decided_by, arguments, reason
        )

    async def add_participant(self, conversation_id: str, agent_id: str) -> ParticipantChange:
        return await self.actor(conversation_id).add_participant(agent_id)

    async def remove_participant(self, conversation_id: str, agent_id: str) -> ParticipantChange:
        return await self.actor(conversation_id).remove_participant(agent_id)

    async def set_policy(
        self, conversation_id: str, policy: ConcurrencyPolicy
    ) -> ConversationChange:
        return await self.actor(conversation_id).set_policy(policy)

    async def complete_conversation(self, conversation_id: str) -> ConversationChange:
        return await self.actor(conversation_id).complete()

    def stream_events(
        self, conversation_id: str, after_seq: int = 0, *, marker: bool = False
    ) -> AsyncIterator[JsonObject]:
        return self.events.feed.subscribe(conversation_id, after_seq, marker=marker)

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        for conversation_id in conversation_ids:
            if conversation_id in self.actors:
                await self.actors.pop(conversation_id).shutdown()

    # ------------------------------------------------------------------ Residency, AsyncOperations

    async def release_idle(self, conversation_id: str) -> bool:
        return False

    def note_idle(self, conversation_id: str) -> None:
        self.idle_noted.append(conversation_id)

    async def start(self, op_id: str, agent_id: str) -> None:
        if self.lost_starts > 0:
            self.lost_starts -= 1
            return
        await self.runner.start(op_id, agent_id)

    async def running(self) -> frozenset[str]:
        return await self.runner.running()
