"""Conversation actors on Ray: the directory actor, and the ``Conversations`` adapter everything
else reaches them through.

Every call gets-or-creates the named detached ``conversation:<id>`` actor through the directory
(which enforces the resident cap) and goes through the one retry helper (``core.retry.ACTOR_CALL``:
eight attempts over about sixteen seconds; a dead, restarting or hibernating actor is
re-activated before the next one); ``post_message`` carries a message id so that a retry never
stores a message twice. Ray's failures become Wonder's errors here, so nothing above sees a Ray
exception. A directory that answers ``AtCapacity`` (every resident actor busy) is not retried:
the caller gets it at once, with its ``Retry-After``.

A message to a conversation whose log no actor holds (its actor is evicted, starting, or not
created yet: the store's writer lease says so, ``actors.conversation.log``) is acknowledged in
the store (``actors.conversation.intake``) and its activation asked for in the background, kept
queued by the directory if the cap is full (the wait is recorded in the conversation's events); the
actor picks the turn up when it starts. So a ``202`` never waits for an actor process to start.

Events reach subscribers without the actor (``stream_events``: this process's
``core.event_feed.EventFeed``, fed by ``cluster.conversation_events``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar, cast

import ray

from actors.conversation.actor import ConversationActor
from actors.conversation.directory import AtCapacity, ConversationDirectory
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
from core.approvals import ApprovalOutcome
from core.approvals import Decision as ApprovalChoice
from core.domain import Caller, ConcurrencyPolicy
from core.errors import WonderError
from core.event_feed import EventFeed
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
from core.retry import ACTOR_CALL, with_retries
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
HIBERNATE_WAIT_S = 5.0
NODES_SEEN_S = 5.0  # the directory's view of the live nodes is at most this old
SHUTDOWN_WAIT_S = 10.0
# Actor handles a process keeps, by conversation, to call a live actor without the directory.
LIVE_HANDLES = 4096


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

    async def activate(
        self, conversation_id: str, replace: bool = False, keep: bool = False
    ) -> Any:
        try:
            return await super().activate(conversation_id, replace, keep)
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

    def resident_actors(self, limit: int = 200) -> list[dict[str, str]]:
        """The resident conversations' actors, most recently active first: conversation id,
        actor name and Ray actor id (the Ray dashboard's address for the actor)."""
        out = []
        for conversation_id, handle in reversed(self._resident.items()):
            actor_id = getattr(handle, "_actor_id", None)
            out.append(
                {
                    "conversation_id": conversation_id,
                    "name": conversation_actor_name(conversation_id),
                    "actor_id": actor_id.hex() if actor_id is not None else "",
                }
            )
            if len(out) >= limit:
                break
        return out


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


class _Refused(Exception):
    """Carries an ``AtCapacity`` past the retry helper (it is retriable, but not by us)."""

    def __init__(self, error: AtCapacity) -> None:
        super().__init__(error.message)
        self.error = error


class RayConversations:
    """``Conversations`` and ``Residency`` over the directory and the conversation actors."""

    def __init__(
        self,
        directory: Callable[[], Any],
        intake: Intake | None = None,
        feed: Callable[[], EventFeed] | None = None,
    ) -> None:
        self._directory = directory
        self._intake = intake
        self._feed = feed
        self._in_flight: set[asyncio.Task[None]] = set()
        self._live: OrderedDict[str, Any] = OrderedDict()  # conversation id → its actor's handle

    def _remember(self, conversation_id: str, handle: Any) -> None:
        self._live[conversation_id] = handle
        self._live.move_to_end(conversation_id)
        while len(self._live) > LIVE_HANDLES:
            self._live.popitem(last=False)

    async def _on_known_actor(
        self, conversation_id: str, call: Callable[[Any], Awaitable[T]]
    ) -> tuple[bool, T | None]:
        """``call`` on the actor this process last reached for ``conversation_id``, without
        asking the directory: ``(True, result)``. ``(False, None)`` when there is none, or it
        is gone (evicted, hibernating, dead): the caller asks the directory. The actor checks
        what matters itself (it refuses while hibernating; a killed one answers nothing), so a
        stale handle costs one failed call, never a wrong answer."""
        handle = self._live.get(conversation_id)
        if handle is None:
            return False, None
        try:
            answer = await call(handle)
        except RAY_CALL_ERRORS as exc:
            error = as_wonder_error(exc, f"conversation {conversation_id}")
            if not error.retriable:
                raise error from None
            if self._live.get(conversation_id) is handle:
                del self._live[conversation_id]
            return False, None
        if self._live.get(conversation_id) is handle:
            self._live.move_to_end(conversation_id)  # the newest kept when there are too many
        return True, answer

    async def _call(
        self, conversation_id: str, call: Callable[[Any], Awaitable[T]], keep: bool = False
    ) -> T:
        """``call(actor)`` on the conversation's live actor, with ``ACTOR_CALL`` retries.
        ``keep``: if the cap is full, the directory keeps the activation queued."""
        reached, result = await self._on_known_actor(conversation_id, call)
        if reached:
            return cast(T, result)
        replace = False

        async def attempt() -> T:
            nonlocal replace
            try:
                handle = await self._directory().activate.remote(conversation_id, replace, keep)
            except RAY_CALL_ERRORS as exc:
                error = as_wonder_error(exc, "the conversation directory")
                if isinstance(error, AtCapacity):
                    raise _Refused(error) from None
                raise error from None
            try:
                answer = await call(handle)
            except RAY_CALL_ERRORS as exc:
                error = as_wonder_error(exc, f"conversation {conversation_id}")
                replace = replace or error.retriable  # dead, restarting or hibernating
                raise error from None
            self._remember(conversation_id, handle)
            return answer

        try:
            return await with_retries(ACTOR_CALL, attempt)
        except _Refused as refused:
            raise refused.error from None

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
        """Persist a user message, start its turn; a retry reuses the message id.

        Acknowledged in the store when no actor holds the conversation's log and it has no
        active turn (the actor starts the turn once activated); otherwise by the actor, which
        applies the concurrency policy."""
        chosen_id = message_id or new_id("msg")
        unsent = message_id is None  # made up here: until it is sent, nothing can have stored it

        def post(actor: Any) -> Awaitable[MessageAck]:
            nonlocal unsent
            first_send, unsent = unsent, False
            posted: Awaitable[MessageAck] = actor.post_message.remote(
                content,
                author,
                message_id=chosen_id,
                source=source,
                reply_to_message_id=reply_to_message_id,
                agent_id=agent_id,
                first_send=first_send,
            )
            return posted

        # A conversation whose actor this process reached lately: straight to it (it acknowledges
        # and applies the policy), no store check and no directory call on the message's path.
        reached, known = await self._on_known_actor(conversation_id, post)
        if reached:
            return cast(MessageAck, known)
        if self._intake is not None:
            unsent = False  # the intake may store it
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
            if ack is not None:
                self._start_later(conversation_id, post, ack)
                return ack
        return await self._call(conversation_id, post)

    def _start_later(
        self, conversation_id: str, post: Callable[[Any], Awaitable[MessageAck]], ack: MessageAck
    ) -> None:
        """Activate the conversation in the background: its actor starts the acknowledged turn.
        At the cap the directory keeps the activation queued; the wait goes in the events."""
        intake = self._intake
        assert intake is not None

        async def start() -> None:
            try:
                await self._call(conversation_id, post, keep=True)
            except AtCapacity as exc:
                note = intake.note_waiting
                await asyncio.to_thread(
                    note, conversation_id, ack.turn_id, exc.message, exc.retry_after_s
                )
            except WonderError as exc:
                log.info(
                    "conversation %s: the actor will pick the turn up on its next activation (%s)",
                    conversation_id,
                    exc.message,
                )

        task = asyncio.get_running_loop().create_task(start())
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

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

    async def decide_approval(
        self,
        conversation_id: str,
        approval_id: str,
        decision: ApprovalChoice,
        decided_by: str,
        arguments: JsonObject | None = None,
        reason: str | None = None,
    ) -> ApprovalOutcome:
        return await self._call(
            conversation_id,
            lambda actor: actor.decide_approval.remote(
                approval_id, decision, decided_by, arguments, reason
            ),
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

    async def residency(self) -> JsonObject:
        """The directory's figures (resident actors against the cap, activations, evictions,
        waiting) and its resident actors (operators: ``GET /v1/operations``)."""
        directory = self._directory()
        stats: JsonObject = await directory.stats.remote()
        actors = await directory.resident_actors.remote()
        return {**stats, "actors": actors}

    async def status(self, conversation_id: str) -> JsonObject:
        """What a live conversation actor is doing (operators, tests, benchmarks)."""
        return await self._call(conversation_id, lambda actor: actor.status.remote())

    def stream_events(
        self, conversation_id: str, after_seq: int = 0, *, marker: bool = False
    ) -> AsyncIterator[JsonObject]:
        """Events after ``after_seq``, then live ones, from this process's feed: the store and
        the events hub, never the conversation's actor (which may be evicted and activated any
        number of times meanwhile)."""
        if self._feed is None:
            raise RuntimeError("this process has no event feed")
        return self._feed().subscribe(conversation_id, after_seq, marker=marker)

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        """Stop the live actors of conversations about to be deleted (their turns cancelled)."""
        for conversation_id in conversation_ids:
            await self._directory().drop.remote(conversation_id)

    async def release_idle(self, conversation_id: str) -> bool:
        """Ask the directory to evict an idle conversation (the actor's idle watchdog)."""
        released: bool = await self._directory().release_idle.remote(conversation_id)
        return released

    def note_idle(self, conversation_id: str) -> None:
        """Tell the directory the actor's last turn ended (fire-and-forget)."""
        try:
            self._directory().note_idle.remote(conversation_id)
        except RAY_CALL_ERRORS as exc:
            log.info("the directory did not hear that %s is idle (%s)", conversation_id, exc)

    async def actor(self, conversation_id: str, evict_first: bool = False) -> Any:
        """The conversation's live actor handle (benchmarks and operators call it directly)."""
        if evict_first:
            self._live.pop(conversation_id, None)
            await self._directory().evict.remote(conversation_id)
        return await self._directory().activate.remote(conversation_id, False)

    async def evict(self, conversation_id: str) -> bool:
        """Evict the conversation's actor now if it is idle (operators, benchmarks)."""
        self._live.pop(conversation_id, None)
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
