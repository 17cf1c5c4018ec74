"""A conversation actor's turns as traces: each turn's root span and the context its steps run in.

A turn's root span is ``invoke_agent {agent}`` (OpenTelemetry's GenAI conventions). It opens when
the turn's first step runs here and closes when the turn completes or fails, with the turn's
usage and outcome. Its id is derived from the turn's id (``core.tracing.turn_span_id``), so an
actor that resumes a turn after a crash continues the same tree. The trace is the turn's own
unless the turn joins another one: a caller's context handed to ``start_agent_call`` or
``run_agent_turn`` (a delegating parent, a workflow node), or one recorded with the turn
(``turn_traces``). Every step of the turn runs with the root as its current span (``step``), so the
model calls, tools and hooks it makes are the root's children, and the context travels with every
call they make to another process.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from actors.conversation.domain import AgentSetup, CompleteTurn, FailTurn, TurnState
from core import tracing
from core.domain import ModelProfile
from core.llm.recording import CallScope, link_turn
from core.model_calls import CallSource
from core.store import Store
from core.tracing import Span, SpanKind, TraceContext, turn_span_id, turn_trace_id

REMEMBERED = 512  # turns whose trace context is kept after they ended (extraction runs later)


class TurnTraces:
    """The traces of one conversation's turns (one per actor)."""

    def __init__(self, store: Store, conversation_id: str, client_id: str) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.client_id = client_id
        self._open: dict[str, Span] = {}
        self._contexts: OrderedDict[str, TraceContext] = OrderedDict()  # turn → its root
        self._parents: dict[str, str] = {}  # turn → the caller's span it continues

    def join(self, turn_id: str, traceparent: str | None) -> None:
        """``turn_id`` continues the caller's trace (``traceparent`` of the caller's span): noted
        for this incarnation and recorded for the next (a resumed turn stays in it)."""
        caller = TraceContext.parse(traceparent)
        if caller is None or turn_id in self._contexts or turn_id in self._open:
            return
        self._remember(turn_id, TraceContext(caller.trace_id, turn_span_id(turn_id)))
        self._parents[turn_id] = caller.span_id
        self.store.records.put_trace(turn_id, caller.trace_id, caller.span_id)

    def context(self, turn_id: str) -> TraceContext:
        """The context of the turn's root span (its id is the same wherever it runs)."""
        found = self._contexts.get(turn_id)
        if found is not None:
            return found
        joined = self.store.records.trace_of(turn_id)
        if joined is not None:
            if joined.parent_span_id:
                self._parents[turn_id] = joined.parent_span_id
            context = TraceContext(joined.trace_id, turn_span_id(turn_id))
        else:
            context = TraceContext(turn_trace_id(turn_id), turn_span_id(turn_id))
        self._remember(turn_id, context)
        return context

    def _remember(self, turn_id: str, context: TraceContext) -> None:
        self._contexts[turn_id] = context
        self._contexts.move_to_end(turn_id)
        while len(self._contexts) > REMEMBERED:
            self._contexts.popitem(last=False)

    def root(self, turn_id: str, agent_id: str | None = None) -> Span:
        """The turn's root span, opened here on first use."""
        span = self._open.get(turn_id)
        if span is not None:
            return span
        context = self.context(turn_id)
        parent_id = self._parents.pop(turn_id, None)
        span = Span(
            name="invoke_agent",
            trace_id=context.trace_id,
            span_id=context.span_id,
            parent_span_id=parent_id,
            kind=SpanKind.INTERNAL,
            conversation_id=self.conversation_id,
            turn_id=turn_id,
        )
        span.update(
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.conversation.id": self.conversation_id,
                "gen_ai.agent.id": agent_id,
                "wonder.turn.id": turn_id,
                "wonder.client.id": self.client_id,
            }
        )
        self._open[turn_id] = span
        return span

    def adopt(self, turn_id: str, setup: AgentSetup) -> None:
        """The turn's agent and model are known (its setup was loaded): on its root span, and
        the model linked to the turn."""
        span = self.root(turn_id, setup.agent.id)
        agent, profile = setup.agent, setup.profile
        span.name = f"invoke_agent {agent.name or agent.id}"
        span.update(
            {
                "gen_ai.agent.id": agent.id,
                "gen_ai.agent.name": agent.name or agent.id,
                "gen_ai.provider.name": profile.provider,
                "gen_ai.request.model": profile.model,
            }
        )
        link_turn(
            turn_id,
            "model",
            f"{profile.provider}/{profile.model}",
            self.conversation_id,
            profile_id=profile.id,
            profile_version=profile.version,
        )

    def call_scope(
        self, turn_id: str, live: TurnState | None, profile: ModelProfile, step: int
    ) -> CallScope:
        """What the turn's next model call is recorded as (its loop step, agent, profile)."""
        agent_id = live.setup.agent.id if live is not None and live.setup is not None else None
        source = CallSource(
            client_id=self.client_id,
            conversation_id=self.conversation_id,
            turn_id=turn_id,
            agent_id=agent_id or (live.agent_id if live is not None else None),
            step=step,
        )
        return CallScope(source=source, profile=profile)

    @contextmanager
    def step(self, turn_id: str, live: bool = True) -> Iterator[TraceContext]:
        """Run one of the turn's steps under its root span: opened if it is not yet and the turn
        is ``live`` (a completed turn's memory extraction runs under the closed root)."""
        if live and turn_id not in self._open:
            self.root(turn_id)
        context = self.context(turn_id)
        with tracing.attached(context):
            yield context

    def ended(self, decision: CompleteTurn | FailTurn) -> None:
        """The turn completed or failed: its root span closes with its usage and outcome."""
        span = self._open.pop(decision.turn_id, None)
        if span is None:
            return
        span.update(
            {
                "gen_ai.usage.input_tokens": decision.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": decision.usage.completion_tokens,
                "wonder.turn.status": "failed" if isinstance(decision, FailTurn) else "completed",
            }
        )
        if isinstance(decision, FailTurn) and not decision.cancelled:
            code = decision.error.code if decision.error is not None else "turn_failed"
            span.fail(str(code), decision.reason)
        span.end()
