"""Wonder's ports implemented in one process, without Ray: for tests of the actor shells.

The actor classes are plain Python handed their ports at construction, so a test can run real
Conversation actors (and the real async-operations runner and executor) over a real store in this
process. ``InProcessCluster`` is the ``Conversations``, ``Residency`` and ``AsyncOperations`` ports
at once: it keeps one actor per conversation, as the directory does on Ray. Only the runtime is
replaced; every class it runs is the production one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from actors.async_operations.runner import AsyncOperationRunner
from actors.conversation.actor import ConversationActor
from actors.conversation.intake import Intake
from actors.conversation.ports import ConversationPorts, ToolPorts
from actors.executor import run_task
from cluster.models import ServedChatModels
from cluster.wiring import executor_services
from core.domain import Caller, ConcurrencyPolicy, TaskDef
from core.errors import Unavailable
from core.jsontypes import JsonObject
from core.ports import (
    AgentAnswer,
    ConversationChange,
    InvocationMode,
    MessageAck,
    ParticipantChange,
    RunParent,
    TaskContext,
    TaskOutcome,
    TurnOutcome,
)
from core.settings import settings_from_env
from core.store import open_store
from core.turn_quotas import StoredQuotas
from core.workflows import NodeRecord, WorkflowRun


class InProcessTasks:
    """``TaskRunner``: the executor's ``run_task`` in this process."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env

    async def run(self, task: TaskDef, task_input: JsonObject, context: TaskContext) -> TaskOutcome:
        return await run_task(task, task_input, context, executor_services(self.settings_env))


class NoWorkflows:
    """``WorkflowRuns`` for tests that run no workflow: any use says so."""

    def _refuse(self) -> Unavailable:
        return Unavailable("no workflows in this in-process test cluster")

    async def start(
        self,
        workflow_id: str,
        input: JsonObject,
        version: int | None = None,
        parent: RunParent | None = None,
        *,
        client_id: str | None = None,
        run_id: str | None = None,
        project_id: str | None = None,
    ) -> str:
        raise self._refuse()

    async def wait(self, run_id: str, timeout_s: float | None = None) -> WorkflowRun:
        raise self._refuse()

    async def cancel(self, run_id: str, reason: str = "cancelled") -> WorkflowRun:
        raise self._refuse()

    def get(self, run_id: str, client_id: str | None = None) -> WorkflowRun:
        raise self._refuse()

    def history(self, run_id: str) -> list[NodeRecord]:
        raise self._refuse()

    async def run_to_end(
        self,
        workflow_id: str,
        input: JsonObject,
        parent: RunParent | None = None,
        version: int | None = None,
        timeout_s: float | None = None,
    ) -> TaskOutcome:
        raise self._refuse()

    async def reserved_run_id(self) -> str | None:
        return None

    def prepare(self) -> None:
        return None


class InProcessCluster:
    """Conversation actors, the runner and the executor, all in this process."""

    def __init__(self, settings_env: dict[str, str]) -> None:
        self.settings_env = settings_env
        self.store = open_store(settings_env)
        self.actors: dict[str, ConversationActor] = {}
        self.tools = ToolPorts(
            store=self.store,
            settings=settings_from_env(settings_env),
            settings_env=settings_env,
            tasks=InProcessTasks(settings_env),
            conversations=self,
            workflows=NoWorkflows(),
        )
        self.runner = AsyncOperationRunner(lambda: self.tools)
        self.intake = Intake(self.store)  # what the gateway's adapter acknowledges with
        # Hand-overs to the runner to lose, as when an actor dies (its node lost) between
        # recording an operation and handing it over.
        self.lost_starts = 0

    def ports(self) -> ConversationPorts:
        tools = self.tools
        return ConversationPorts(
            store=tools.store,
            settings=tools.settings,
            settings_env=tools.settings_env,
            tasks=tools.tasks,
            conversations=self,
            workflows=tools.workflows,
            residency=self,
            operations=self,
            models=ServedChatModels(tools.settings.allow_test_doubles),
            quotas=StoredQuotas(tools.store),
        )

    def actor(self, conversation_id: str) -> ConversationActor:
        if conversation_id not in self.actors:
            self.actors[conversation_id] = ConversationActor(conversation_id, self.ports)
        return self.actors[conversation_id]

    def crash(self, conversation_id: str) -> ConversationActor:
        """Forget the conversation's actor as a kill -9 would (its tasks are cancelled), and
        start a new incarnation of it."""
        old = self.actors.pop(conversation_id)
        for task in [*old._work.values(), *old._side]:
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
        actor_ready: bool | None = None,
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
    ) -> AgentAnswer:
        return await self.actor(conversation_id).start_agent_call(input, caller, mode, agent_id)

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

    def stream_events(self, conversation_id: str, after_seq: int = 0) -> AsyncIterator[JsonObject]:
        return self.actor(conversation_id).events(after_seq)

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        for conversation_id in conversation_ids:
            if conversation_id in self.actors:
                await self.actors.pop(conversation_id).shutdown()

    # ------------------------------------------------------------------ Residency, AsyncOperations

    async def release_idle(self, conversation_id: str) -> bool:
        return False

    async def start(self, op_id: str, agent_id: str) -> None:
        if self.lost_starts > 0:
            self.lost_starts -= 1
            return
        await self.runner.start(op_id, agent_id)

    async def running(self) -> frozenset[str]:
        return await self.runner.running()
