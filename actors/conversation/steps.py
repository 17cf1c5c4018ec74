"""The effects of a turn's steps: each runs one thing and answers with the event that says how it
went (context assembled or failed, the model answered or failed, tools returned, memories
extracted...). Steps never decide what comes next: ``planning`` does, from their events.

Infrastructure errors are retried here with the one retry helper (context assembly, the model call
and memory extraction use the policies of ARCHITECTURE §5; tools their own ``retry``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

from actors.conversation.context import (
    assemble_context,
    history_messages,
    may_decline,
    openai_body,
    pending_operations_note,
    recent_turn_ids,
    request_from_hook,
    turn_transcript,
)
from actors.conversation.domain import (
    AgentSetup,
    ContextAssembled,
    ContextAssemblyFailed,
    DispatchTool,
    MemoriesExtracted,
    MemoryExtractionFailed,
    ModelAnswered,
    ModelFailed,
    OperationsChecked,
    ReturnToolError,
    StartOperation,
    ToolCatalog,
    ToolPlan,
    ToolsReturned,
)
from actors.conversation.log import token_event
from actors.conversation.ports import ConversationPorts
from actors.conversation.records import WAITING
from actors.conversation.setups import AgentSetups
from actors.conversation.tool_calls import arguments_problem, narrowed
from actors.conversation.tool_dispatch import ToolDispatcher
from actors.conversation.turn_spans import (
    HookRun,
    end_tool_span,
    hook_span,
    result_failed,
    tool_span,
)
from core.context_contract import CONTEXT_CONTRACT, parse_hook_answer
from core.domain import (
    AsyncOperation,
    Message,
    OperationStatus,
    PendingExtraction,
    TaskDef,
    ToolError,
    ToolResult,
    Turn,
    Usage,
)
from core.errors import NotFound, WonderError
from core.forks import messages_of_turns, recent_turn_ids_visible
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.llm import recording
from core.llm.protocol import (
    ChatModel,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
)
from core.llm.recording import CallScope, link_turn
from core.model_calls import CallSource
from core.model_override import turn_profile
from core.retry import CONTEXT_ASSEMBLY, LLM_CALL, MEMORY_EXTRACTION, RetryPolicy, with_retries

Publish = Callable[[JsonObject], None]


class TurnSteps:
    """The steps of one conversation's turns, over its ports."""

    def __init__(self, ports: ConversationPorts, tools: ToolDispatcher, publish: Publish) -> None:
        self.ports = ports
        self.store = ports.store
        self.tools = tools
        self.publish = publish
        self.setups = AgentSetups(ports.store)

    @property
    def conversation_id(self) -> str:
        return self.tools.conversation.id

    # ------------------------------------------------------------------ context assembly

    def load_setup(self, agent_id: str | None) -> AgentSetup:
        """The agent, its persona (inline or from the library), model profile, tools and hook
        tasks, as the library holds them now (read again only when it changed: ``setups``)."""
        agent_id = agent_id or self.tools.conversation.agent_id
        if agent_id is None:
            raise NotFound("this conversation has no agent to answer")
        return self.setups.current(agent_id)

    async def assemble(
        self, turn_id: str, agent_id: str | None
    ) -> ContextAssembled | ContextAssemblyFailed:
        """The context for the turn's next model loop: the built-in request, or the one the
        persona's hook assembles from it (``core.context_contract``). Raises ``WonderError`` if
        the agent's setup cannot be loaded."""
        setup = self.load_setup(agent_id)
        # A message may override its turn's model (seed 004): applied and recorded here.
        profile = turn_profile(self.store, turn_id, setup.profile, setup.agent.client_id)
        setup = replace(setup, profile=profile)
        # A routed message may narrow the persona's tools for its turn (seed 004 permissions).
        routed = self.store.message_routes.for_turn(turn_id)
        if routed is not None and routed.permissions is not None:
            setup = replace(setup, catalog=narrowed(setup.catalog, routed.permissions.tools))
        turn = self.store.turns.get(turn_id)
        history = self._recent_history(turn_id, setup.persona.recent_turns_limit)
        pending = self.store.async_operations.list(self.conversation_id, statuses=WAITING)
        note = pending_operations_note(pending)
        replied_to = (
            self.store.messages.get(turn.reply_to_message_id)
            if turn.reply_to_message_id is not None
            else None
        )
        decline = may_decline(turn.caller)
        default = assemble_context(
            setup.persona,
            setup.profile,
            history,
            setup.catalog,
            setup.agent.id,
            note,
            replied_to,
            decline,
        )
        hook = setup.persona.context_hook
        if not hook:
            return ContextAssembled(turn_id, setup, default, utc_now())
        payload = self._hook_input(turn, setup, history, pending, default)
        workflow = setup.persona.context_assembly_workflow is not None
        task = setup.hook_task(hook)
        run = HookRun("context_assembly", hook, turn_id, setup.agent.id, new_id("hookrun"))
        try:
            raw = await self._run_hook(run, payload, CONTEXT_ASSEMBLY, workflow=workflow, task=task)
            answer = parse_hook_answer(raw)
            if answer.request is not None:
                base = request_from_hook(answer.request, default, setup.catalog)
            else:
                extra = answer.system_context or ""
                system_context = "\n\n".join(part for part in (extra, note) if part)
                base = assemble_context(
                    setup.persona,
                    setup.profile,
                    history,
                    setup.catalog,
                    setup.agent.id,
                    system_context,
                    replied_to,
                    decline,
                )
        except WonderError as exc:
            return ContextAssemblyFailed(turn_id, ToolError.of(exc), utc_now(), run.run_id)
        return ContextAssembled(turn_id, setup, base, utc_now(), run.run_id)

    async def _run_hook(
        self,
        run: HookRun,
        payload: JsonObject,
        policy: RetryPolicy,
        *,
        workflow: bool = False,
        task: TaskDef | None = None,
    ) -> JsonObject:
        """A hook with its retry policy, as one span and one linked hook run of the turn (its
        model calls are recorded as the hook's); exhausted retries are counted and raised."""
        link_turn(
            run.turn_id,
            "hook_run",
            run.run_id,
            self.conversation_id,
            hook=run.hook,
            task_id=run.task_id,
            workflow=workflow,
        )
        source = CallSource(
            client_id=self.tools.conversation.client_id,
            conversation_id=self.conversation_id,
            turn_id=run.turn_id,
            agent_id=run.agent_id,
            hook=run.hook,
            hook_run_id=run.run_id,
        )
        with (
            hook_span(run, self.conversation_id, workflow),
            recording.scoped(CallScope(source=source)),
        ):
            try:
                return await with_retries(
                    policy,
                    lambda: self.tools.run_hook(
                        run.task_id,
                        payload,
                        run.turn_id,
                        run.agent_id,
                        workflow=workflow,
                        task=task,
                        hook=run.hook,
                        hook_run_id=run.run_id,
                    ),
                )
            except WonderError:
                self.ports.metrics.hook_failed(run.agent_id, run.hook)
                raise

    def _recent_history(self, turn_id: str, limit: int) -> list[Message]:
        # A fork's inherited turns count as its own (core.forks).
        turn_ids = recent_turn_ids_visible(self.store, self.conversation_id, last=limit + 1)
        wanted = recent_turn_ids(turn_ids, turn_id, limit)
        return messages_of_turns(self.store, self.conversation_id, wanted)

    def _hook_input(
        self,
        turn: Turn,
        setup: AgentSetup,
        history: list[Message],
        pending: Sequence[AsyncOperation],
        default: ChatRequest,
    ) -> JsonObject:
        """What a context-assembly hook is given (``core.context_contract``, version 1)."""
        return {
            "contract": CONTEXT_CONTRACT,
            "agent_id": setup.agent.id,
            "conversation_id": self.conversation_id,
            "turn_id": turn.id,
            "query": turn.input,
            "conversation": self.tools.conversation.model_dump(mode="json"),
            "turn": turn.model_dump(mode="json"),
            "persona": setup.persona.model_dump(mode="json"),
            "model_profile": setup.profile.model_dump(mode="json", exclude={"script"}),
            "request": openai_body(default),
            "recent_messages": history_messages(history, setup.agent.id),
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
            "tool_specs": [spec.to_openai() for spec in default.tools],
        }

    # ------------------------------------------------------------------ the model

    async def call_model(
        self,
        turn_id: str,
        model: ChatModel,
        request: ChatRequest,
        catalog: ToolCatalog | None = None,
        *,
        scope: CallScope | None = None,
    ) -> ModelAnswered | ModelFailed:
        """One model call, streamed token by token to subscribers, with the LLM retry policy;
        the tool calls' arguments are checked against their schemas in a worker thread (client
        schemas never run on the event loop). Each body sent is recorded as ``scope``'s
        (``core.llm.recording``), each retry as its next attempt."""
        attempts = 0
        scope = scope or CallScope(source=CallSource(turn_id=turn_id))

        async def attempt() -> tuple[str, tuple[ToolCallRequested, ...], ModelFinished]:
            nonlocal attempts
            attempts += 1
            text: list[str] = []
            calls: list[ToolCallRequested] = []
            finished = ModelFinished()
            keyed = replace(request, cache_key=request.cache_key or self.conversation_id)
            with recording.scoped(replace(scope, attempt=attempts)):
                async for chunk in model.stream(keyed):  # the key keeps it on one model replica
                    match chunk:
                        case TextDelta(text=delta):
                            text.append(delta)
                            self._publish_token(turn_id, delta)
                        case ToolCallRequested():
                            calls.append(chunk)
                        case ModelFinished():
                            finished = chunk
            return "".join(text), tuple(calls), finished

        async def on_retry(number: int, error: Exception) -> None:
            self.ports.metrics.model_retry(scope.source.agent_id or "")
            self.publish(
                {
                    "seq": None,
                    "type": "llm.retry",
                    "conversation_id": self.conversation_id,
                    "turn_id": turn_id,
                    "attempt": number,
                    "error": str(error),
                }
            )

        try:
            text, calls, finished = await with_retries(LLM_CALL, attempt, on_retry)
        except WonderError as exc:
            return ModelFailed(turn_id, ToolError.of(exc), utc_now())
        usage = Usage(
            prompt_tokens=finished.prompt_tokens, completion_tokens=finished.completion_tokens
        )
        op_ids = tuple(new_id("op") for _ in calls)
        at = utc_now()
        client_id = self.tools.conversation.client_id
        left = await self.ports.quotas.tokens_left(client_id, turn_id, at)
        problems = None
        if catalog is not None and calls:
            found = await asyncio.to_thread(lambda: [arguments_problem(c, catalog) for c in calls])
            problems = tuple(found)
        return ModelAnswered(
            turn_id, text, calls, usage, op_ids, at, tokens_left=left, schema_problems=problems
        )

    def _publish_token(self, turn_id: str, delta: str) -> None:
        self.publish(token_event(self.conversation_id, turn_id, delta))

    # ------------------------------------------------------------------ tools

    async def run_tools(
        self, turn_id: str, agent_id: str, plans: Sequence[ToolPlan]
    ) -> ToolsReturned:
        """Every plan of one answer, concurrently; results in call order."""

        async def one(plan: ToolPlan) -> ToolResult:
            match plan:
                case ReturnToolError(result=result):
                    result_failed(self.ports.metrics, agent_id, plan.call.name, result)
                    return result
                case StartOperation(operation=operation, ack=ack, tool=tool):
                    # An agent looped in joins at once; its answer is what comes later.
                    joined = await self.tools.join_now(tool, operation, ack)
                    await self.ports.operations.start(operation.id, agent_id)
                    return joined or ack
                case DispatchTool():
                    with tool_span(plan, self.conversation_id, turn_id) as span:
                        result = await self.tools.dispatch(turn_id, agent_id, plan)
                        end_tool_span(span, result)
                    result_failed(self.ports.metrics, agent_id, plan.tool.name, result)
                    return result

        results = await asyncio.gather(*(one(plan) for plan in plans))
        return ToolsReturned(turn_id, tuple(results), utc_now())

    # ------------------------------------------------------------------ after the answer

    async def extract_memories(
        self, extraction: PendingExtraction
    ) -> MemoriesExtracted | MemoryExtractionFailed:
        """The memory extraction hook of a completed turn, given the turn's transcript. Its
        task is the one read with the setup that assembled the turn's context, when it is."""
        turn_id, agent_id, task_id = extraction.turn_id, extraction.agent_id, extraction.task_id
        setup = self.setups.last_read(agent_id)
        workflow = extraction.workflow
        task = setup.hook_task(task_id) if setup is not None and not workflow else None
        messages = self.store.messages.list(self.conversation_id, turn_ids=[turn_id])
        transcript = turn_transcript(messages, self.store.moves.list(turn_id))
        payload = {
            "agent_id": agent_id,
            "conversation_id": self.conversation_id,
            "turn_id": turn_id,
            "transcript": transcript,
        }
        run = HookRun("memory_extraction", task_id, turn_id, agent_id, new_id("hookrun"))
        try:
            await self._run_hook(run, payload, MEMORY_EXTRACTION, workflow=workflow, task=task)
        except WonderError as exc:
            return MemoryExtractionFailed(turn_id, ToolError.of(exc), utc_now(), run.run_id)
        return MemoriesExtracted(turn_id, utc_now(), run.run_id)

    async def check_operations(
        self, turn_id: str, agent_id: str | None, operations: Sequence[AsyncOperation]
    ) -> OperationsChecked:
        """Which of a recovered turn's pending operations the runner no longer has.

        One the runner never took (``started_at`` unset: the previous incarnation recorded it,
        then died before handing it over — a lost node) has not run: it is handed over now, not
        lost. One that finished meanwhile is the runner's to deliver."""
        running = await self.ports.operations.running()
        lost: list[AsyncOperation] = []
        for op in operations:
            if op.id in running:
                continue
            stored = self.store.async_operations.get(op.id)
            if stored.status is not OperationStatus.PENDING:
                continue
            if stored.started_at is None:
                agent = agent_id or self.store.conversations.get(self.conversation_id).agent_id
                await self.ports.operations.start(op.id, agent or "")
                continue
            lost.append(op)
        return OperationsChecked(turn_id, tuple(lost), utc_now())
