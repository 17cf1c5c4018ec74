"""Conversation actors on Ray: the directory actor, and the ``Conversations`` adapter everything
else reaches them through.

Every call gets-or-creates the named detached ``conversation:<id>`` actor through the directory
(which enforces the resident cap) and goes through the one retry helper (``core.retry.ACTOR_CALL``:
eight attempts over about sixteen seconds; a dead, restarting or hibernating actor is
re-activated before the next one); ``post_message`` carries a message id so that a retry never
stores a message twice. Ray's failures become Wonder's errors here, so nothing above sees a Ray
exception.

A message to a conversation whose actor is not started (the directory says so at once) or does
not answer within ``ACK_WAIT_S`` is acknowledged in the store instead
(``actors.conversation.intake``) while the call to the actor goes on in the background; the actor
picks the turn up when it is ready. So a ``202`` never waits for an actor process to start, nor
for a timeout when the directory already knows the actor is not there.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar

import ray

from actors.conversation.actor import ConversationActor
from actors.conversation.directory import ConversationDirectory
from actors.conversation.intake import Intake
from actors.conversation.ports import ConversationPorts
from cluster import placement
from cluster.metrics import ray_metrics
from cluster.naming import (
    DIRECTORY_NAME,
    as_wonder_error,
    conversation_actor_name,
    named_detached,
)
from cluster.preflight import live_nodes
from core.domain import Caller, ConcurrencyPolicy
from core.ids import new_id
from core.jsontypes import JsonObject
from core.ports import (
    AgentAnswer,
    ConversationChange,
    InvocationMode,
    MessageAck,
    ParticipantChange,
    TurnOutcome,
)
from core.retry import ACTOR_CALL, STREAM_RESUME, with_retries
from core.settings import Settings, settings_from_env
from core.tracing import current_traceparent

log = logging.getLogger("wonder.cluster")

T = TypeVar("T")
PortsFactory = Callable[[dict[str, str]], ConversationPorts]
RAY_CALL_ERRORS = (
    ray.exceptions.RayTaskError,
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
)
BACKPRESSURE_EVENTS = 16
ACK_WAIT_S = 0.05  # a ready actor acknowledges in a few ms; past this, acknowledge in the store
READY_SEEN_S = 1.0  # a conversation seen ready this recently is not asked about again
NOT_READY_SEEN_S = 0.25  # … and one seen not started, this recently
HIBERNATE_WAIT_S = 5.0
NODES_SEEN_S = 5.0  # the directory's view of the live nodes is at most this old
SHUTDOWN_WAIT_S = 10.0


class NodeChoice:
    """Where the directory puts a new conversation actor: the eligible live node holding the
    fewest of the directory's actors (``placement.conversation_nodes``, ``least_held``). Ray
    itself would put these zero-resource actors on a random node (``cluster.placement``)."""

    def __init__(
        self,
        settings: Settings,
        nodes: Callable[[], list[placement.NodeView]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._nodes = nodes
        self._clock = clock
        self._seen: tuple[float, list[str]] | None = None
        self._placed: dict[str, str] = {}  # conversation id → the node chosen for its actor

    def candidates(self) -> list[str]:
        """The eligible live nodes, as seen at most ``NODES_SEEN_S`` ago."""
        now = self._clock()
        if self._seen is None or now - self._seen[0] >= NODES_SEEN_S:
            self._seen = (now, placement.conversation_nodes(self.settings, self._nodes()))
        return self._seen[1]

    def choose(self, conversation_id: str, held: Collection[str]) -> str | None:
        """The node for ``conversation_id``'s actor; the directory holds the actors of ``held``
        (which is all that is counted). ``None``: no node known, Ray chooses."""
        self._placed = {c: node for c, node in self._placed.items() if c in held}
        node = placement.least_held(self.candidates(), self._placed.values())
        if node is not None:
            self._placed[conversation_id] = node
        return node

    def held_per_node(self) -> dict[str, int]:
        return dict(Counter(self._placed.values()))


class RayActorHost:
    """``ActorHost``: conversation actors as named detached Ray actors, on the node ``choice``
    gives."""

    def __init__(
        self, settings_env: dict[str, str], ports: PortsFactory, choice: NodeChoice
    ) -> None:
        self.settings_env = settings_env
        self._ports = ports
        self.choice = choice

    def create(self, conversation_id: str, held: Collection[str]) -> Any:
        factory = functools.partial(self._ports, dict(self.settings_env))
        node = self.choice.choose(conversation_id, held)
        return named_detached(
            ConversationActor,
            conversation_actor_name(conversation_id),
            conversation_id,
            factory,
            max_task_retries=0,
            **placement.conversation_options(self.choice.settings, node),
        )

    async def ready(self, handle: Any) -> None:
        await handle.__ray_ready__.remote()

    async def try_hibernate(self, handle: Any) -> bool:
        try:
            agreed: bool = await asyncio.wait_for(
                handle.try_hibernate.remote(), timeout=HIBERNATE_WAIT_S
            )
        except (ray.exceptions.RayActorError, TimeoutError):
            return True  # dead or wedged: forget it
        return agreed

    async def shut_down(self, handle: Any, reason: str) -> None:
        try:
            await asyncio.wait_for(handle.shutdown.remote(reason), timeout=SHUTDOWN_WAIT_S)
        except (ray.exceptions.RayError, TimeoutError):
            log.warning("a conversation actor did not shut down cleanly (%s)", reason)

    def kill(self, handle: Any) -> None:
        ray.kill(handle, no_restart=True)


class ConversationDirectoryActor(ConversationDirectory):
    """The directory as Ray runs it: it creates conversation actors with ``ports``."""

    def __init__(self, max_resident: int, settings_env: dict[str, str], ports: PortsFactory):
        self.settings_env = dict(settings_env)
        settings = settings_from_env(self.settings_env)
        self.host = RayActorHost(self.settings_env, ports, NodeChoice(settings, live_nodes))
        super().__init__(
            max_resident,
            self.host,
            max_starting=settings.max_starting_conversations or starts_that_fit(),
            max_waiting=settings.max_waiting_conversations,
            reserve_size=settings.conversation_reserve,
        )
        asyncio.get_running_loop().call_soon(self.refill)  # Ray builds it on its event loop
        self._reported = (0, 0)  # activations, evictions already counted in the metrics

    async def activate(self, conversation_id: str, replace: bool = False) -> Any:
        try:
            return await super().activate(conversation_id, replace)
        finally:
            self._report()

    async def release_idle(self, conversation_id: str) -> bool:
        released = await super().release_idle(conversation_id)
        self._report()
        return released

    async def drop(self, conversation_id: str) -> bool:
        dropped = await super().drop(conversation_id)
        self._report()
        return dropped

    def _report(self) -> None:
        """Resident/activating gauges; activations and evictions since the last report."""
        metrics = ray_metrics()
        metrics.resident_conversations(len(self._resident), len(self._starting) + self._waiting)
        activations, evictions = self._reported
        for _ in range(self.activations - activations):
            metrics.conversation_activated()
        for _ in range(self.evictions - evictions):
            metrics.conversation_evicted()
        self._reported = (self.activations, self.evictions)

    def configure(
        self, max_resident: int | None = None, idle_ttl_s: float | None = None
    ) -> dict[str, Any]:
        """Change the cap, and the idle TTL of conversation actors created from now on."""
        if idle_ttl_s is not None:
            self.settings_env["WONDER_CONVERSATION_IDLE_TTL_S"] = str(idle_ttl_s)
        return super().configure(max_resident)

    def stats(self) -> dict[str, Any]:
        """The directory's figures, and how many of its actors it placed on each node."""
        return {**super().stats(), "nodes": self.host.choice.held_per_node()}


def starts_that_fit() -> int:
    """Actor starts at once that leave the cluster room for the work already running: each start
    is a process importing Python at full speed on one core, so half the cluster's CPUs (a burst
    of starts that fills every core starves the gateway's acknowledgements, measured in
    benchmarks/activation.py)."""
    cpus = ray.cluster_resources().get("CPU", 2.0)  # type: ignore[no-untyped-call]
    return max(1, int(cpus) // 2)


_directories: dict[tuple[tuple[str, str], ...], Any] = {}


def directory_handle(settings_env: dict[str, str], max_resident: int, ports: PortsFactory) -> Any:
    """The conversation directory actor (get-or-create; cached per process)."""
    key = tuple(sorted(settings_env.items()))
    if key not in _directories:
        _directories[key] = named_detached(
            ConversationDirectoryActor,
            DIRECTORY_NAME,
            max_resident,
            settings_env,
            ports,
            **placement.singleton_options(),
        )
    return _directories[key]


class RayConversations:
    """``Conversations`` and ``Residency`` over the directory and the conversation actors."""

    def __init__(self, directory: Callable[[], Any], intake: Intake | None = None) -> None:
        self._directory = directory
        self._intake = intake
        self._in_flight: set[asyncio.Future[MessageAck]] = set()
        self._seen: dict[str, tuple[float, bool]] = {}  # conversation id → (when, ready)

    async def _call(self, conversation_id: str, call: Callable[[Any], Awaitable[T]]) -> T:
        """``call(actor)`` on the conversation's live actor, with ``ACTOR_CALL`` retries."""
        replace = False

        async def attempt() -> T:
            nonlocal replace
            try:
                handle = await self._directory().activate.remote(conversation_id, replace)
            except RAY_CALL_ERRORS as exc:
                raise as_wonder_error(exc, "the conversation directory") from None
            try:
                return await call(handle)
            except RAY_CALL_ERRORS as exc:
                error = as_wonder_error(exc, f"conversation {conversation_id}")
                replace = replace or error.retriable  # dead, restarting or hibernating
                raise error from None

        return await with_retries(ACTOR_CALL, attempt)

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
        """Persist a user message, start its turn; a retry reuses the message id.

        Acknowledged by the actor when it is started and answers within ``ACK_WAIT_S``, else in
        the store (when the conversation has no active turn there; otherwise this waits for the
        actor, which applies the concurrency policy)."""
        chosen_id = message_id or new_id("msg")
        ready = self._intake is None or (
            actor_ready if actor_ready is not None else await self.is_ready(conversation_id)
        )
        posted: asyncio.Future[MessageAck] = asyncio.ensure_future(
            self._call(
                conversation_id,
                lambda actor: actor.post_message.remote(
                    content,
                    author,
                    message_id=chosen_id,
                    source=source,
                    reply_to_message_id=reply_to_message_id,
                    agent_id=agent_id,
                ),
            )
        )
        if self._intake is None:
            return await posted
        done, _pending = await asyncio.wait({posted}, timeout=ACK_WAIT_S if ready else 0)
        if posted in done:
            return posted.result()
        try:
            ack = await asyncio.to_thread(
                self._intake.acknowledge,
                conversation_id,
                content,
                author,
                message_id=chosen_id,
                source=source,  # type: ignore[arg-type]
                reply_to_message_id=reply_to_message_id,
                agent_id=agent_id,
            )
        except BaseException:
            self._let_run(posted, conversation_id)  # it refuses too, or picks up what is stored
            raise
        if ack is None:
            return await posted
        self._let_run(posted, conversation_id)
        return ack

    def _let_run(self, posted: asyncio.Future[MessageAck], conversation_id: str) -> None:
        """Keep the call to the actor going after answering: it starts the acknowledged turn."""
        self._in_flight.add(posted)

        def done(future: asyncio.Future[MessageAck]) -> None:
            self._in_flight.discard(future)
            if not future.cancelled() and future.exception() is not None:
                log.info(
                    "conversation %s: the actor will pick the turn up on its next activation (%s)",
                    conversation_id,
                    future.exception(),
                )

        posted.add_done_callback(done)

    async def is_ready(self, conversation_id: str) -> bool:
        """Asks the directory, remembering the answer briefly (``READY_SEEN_S``,
        ``NOT_READY_SEEN_S``: a stale answer costs a store acknowledgement or an ``ACK_WAIT_S``,
        never a wrong one); a directory that cannot answer counts as not ready."""
        now = time.monotonic()
        seen = self._seen.get(conversation_id)
        if seen is not None and now - seen[0] < (READY_SEEN_S if seen[1] else NOT_READY_SEEN_S):
            return seen[1]
        try:
            ready: bool = await self._directory().is_ready.remote(conversation_id)
        except RAY_CALL_ERRORS as exc:
            log.info("the directory did not say whether %s is ready (%s)", conversation_id, exc)
            return False
        if len(self._seen) > 4096:
            self._seen.clear()
        self._seen[conversation_id] = (now, ready)
        return ready

    async def reserved_conversation_id(self) -> str | None:
        """An id whose conversation actor is already running (``None``: pick your own)."""
        try:
            taken: str | None = await self._directory().take_reserved.remote()
        except RAY_CALL_ERRORS as exc:
            log.info("no reserved conversation actor (%s)", exc)
            return None
        return taken

    async def start_agent_call(
        self,
        conversation_id: str,
        input: str,
        caller: Caller,
        mode: InvocationMode = "delegate",
        agent_id: str | None = None,
        message_id: str | None = None,
    ) -> AgentAnswer:
        trace = current_traceparent()  # the caller's span: the turn joins its trace
        return await self._call(
            conversation_id,
            lambda actor: actor.start_agent_call.remote(
                input, caller, mode, agent_id, message_id, trace
            ),
        )

    async def run_agent_turn(self, conversation_id: str, turn_id: str) -> AgentAnswer:
        trace = current_traceparent()
        return await self._call(
            conversation_id, lambda actor: actor.run_agent_turn.remote(turn_id, trace)
        )

    async def wait_for_turn(
        self, conversation_id: str, turn_id: str, timeout_s: float = 300.0
    ) -> TurnOutcome:
        return await self._call(
            conversation_id, lambda actor: actor.wait_for_turn.remote(turn_id, timeout_s)
        )

    async def deliver_operation(self, conversation_id: str, op_id: str) -> bool:
        return await self._call(
            conversation_id, lambda actor: actor.deliver_operation.remote(op_id)
        )

    async def cancel_turn(
        self, conversation_id: str, turn_id: str, reason: str = "cancelled"
    ) -> TurnOutcome:
        return await self._call(
            conversation_id, lambda actor: actor.cancel_turn.remote(turn_id, reason)
        )

    async def add_participant(self, conversation_id: str, agent_id: str) -> ParticipantChange:
        return await self._call(
            conversation_id, lambda actor: actor.add_participant.remote(agent_id)
        )

    async def remove_participant(self, conversation_id: str, agent_id: str) -> ParticipantChange:
        return await self._call(
            conversation_id, lambda actor: actor.remove_participant.remote(agent_id)
        )

    async def set_policy(
        self, conversation_id: str, policy: ConcurrencyPolicy
    ) -> ConversationChange:
        return await self._call(conversation_id, lambda actor: actor.set_policy.remote(policy))

    async def complete_conversation(self, conversation_id: str) -> ConversationChange:
        return await self._call(conversation_id, lambda actor: actor.complete.remote())

    async def status(self, conversation_id: str) -> JsonObject:
        """What a live conversation actor is doing (operators, tests, benchmarks)."""
        return await self._call(conversation_id, lambda actor: actor.status.remote())

    async def stream_events(
        self, conversation_id: str, after_seq: int = 0
    ) -> AsyncIterator[JsonObject]:
        """Events after ``after_seq``, then live ones, until the caller stops iterating.

        If the actor dies or is evicted while streaming, the stream resumes from the last ``seq``
        it delivered on a re-activated actor (``STREAM_RESUME``), so the caller sees no gap and no
        duplicate. A resubscription asks for one event before that ``seq``: the actor's replay of
        it (dropped here) proves the new subscription works even on a quiet conversation, so only
        subscriptions that fail *in a row* count against the budget, however many times the actor
        restarts in the stream's life.
        """
        last = after_seq
        replace = False
        failures = 0  # subscriptions in a row that failed before delivering anything
        while True:
            generator = None
            try:
                handle = await self._directory().activate.remote(conversation_id, replace)
                # Backpressure: the actor runs at most a few events ahead of this consumer, so a
                # slow consumer's tokens wait in the actor's queue, where they are coalesced.
                generator = handle.events.options(
                    num_returns="streaming", _generator_backpressure_num_objects=BACKPRESSURE_EVENTS
                ).remote(max(last - 1, 0) if replace else last)
                async for ref in generator:
                    event: JsonObject = await ref
                    failures = 0  # this subscription works: a later failure is a new one
                    seq = event.get("seq")
                    if seq is not None:
                        if int(seq) <= last:
                            continue  # the replayed event a resubscription asked for
                        last = int(seq)
                    yield event
                return
            except RAY_CALL_ERRORS as exc:
                failures += 1
                error = as_wonder_error(exc, f"the event stream of {conversation_id}")
                if not error.retriable or failures >= STREAM_RESUME.attempts:
                    log.warning(
                        "the event stream of %s gave up after %d failed subscriptions: %s",
                        conversation_id,
                        failures,
                        error.message,
                    )
                    raise error from None
            finally:
                if generator is not None:
                    ray.cancel(generator)
            await asyncio.sleep(STREAM_RESUME.backoff(failures))
            replace = True

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        """Stop the live actors of conversations about to be deleted (their turns cancelled)."""
        for conversation_id in conversation_ids:
            await self._directory().drop.remote(conversation_id)

    async def release_idle(self, conversation_id: str) -> bool:
        """Ask the directory to evict an idle conversation (the actor's idle watchdog)."""
        released: bool = await self._directory().release_idle.remote(conversation_id)
        return released

    async def actor(self, conversation_id: str, evict_first: bool = False) -> Any:
        """The conversation's live actor handle (benchmarks and operators call it directly)."""
        if evict_first:
            await self._directory().evict.remote(conversation_id)
        return await self._directory().activate.remote(conversation_id, False)

    async def evict(self, conversation_id: str) -> bool:
        """Evict the conversation's actor now if it is idle (operators, benchmarks)."""
        evicted: bool = await self._directory().evict.remote(conversation_id)
        return evicted

    async def directory_stats(self) -> JsonObject:
        stats: JsonObject = await self._directory().stats.remote()
        return stats

    async def configure_directory(
        self, max_resident: int | None = None, idle_ttl_s: float | None = None
    ) -> JsonObject:
        stats: JsonObject = await self._directory().configure.remote(max_resident, idle_ttl_s)
        return stats
