"""Actor factories and the one way the rest of Wonder reaches a conversation.

The factories apply ``ray.remote`` to the plain actor classes with their names, namespace and
lifetime (Serve's ``get_controller_impl`` pattern). The coroutines below get-or-create the named
detached ``conversation:<id>`` actor through the directory and retry once if it died or was being
evicted; ``post_message`` carries a message id so that a retry never stores a message twice.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import ray

from actors.conversation.actor import ConversationActor, Hibernating
from actors.conversation.directory import ConversationDirectory
from cluster.config import Settings
from core.errors import NonRetryableError, WonderError
from core.ids import new_id

NAMESPACE = "wonder"
BACKPRESSURE_EVENTS = 16
DIRECTORY_NAME = "conversation-directory"

JsonObject = dict[str, Any]

_directory: Any = None
_runner: Any = None


def wonder_env() -> dict[str, str]:
    """This process's ``WONDER_*`` settings, handed to the actors it creates."""
    return {k: v for k, v in os.environ.items() if k.startswith("WONDER_")}


def conversation_actor_name(conversation_id: str) -> str:
    return f"conversation:{conversation_id}"


def named_detached(cls: type, name: str, *args: Any, **options: Any) -> Any:
    """Get or create the named detached actor ``name`` of ``cls`` in Wonder's namespace.

    The one place that applies ``ray.remote`` to Wonder's plain actor classes: coordination
    actors take no CPU (they wait on others), restart after a crash (their state is in the store),
    and serve many calls at once (they are async).
    """
    defaults: dict[str, Any] = {
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_concurrency": 1000,
    }
    remote_cls = ray.remote(cls)
    return remote_cls.options(name=name, **{**defaults, **options}).remote(*args)  # type: ignore[attr-defined]


def create_conversation_actor(conversation_id: str, settings_env: dict[str, str]) -> Any:
    """Get or create the named detached Conversation actor (used by the directory only)."""
    return named_detached(
        ConversationActor,
        conversation_actor_name(conversation_id),
        conversation_id,
        settings_env,
        max_task_retries=0,
    )


class ConversationDirectoryActor(ConversationDirectory):
    def __init__(self, max_resident: int, settings_env: dict[str, str]) -> None:
        self.settings_env = dict(settings_env)
        super().__init__(
            max_resident,
            lambda cid: create_conversation_actor(cid, self.settings_env),
        )

    def configure(  # type: ignore[override]
        self, max_resident: int | None = None, idle_ttl_s: float | None = None
    ) -> dict[str, Any]:
        """Change the cap, and the idle TTL of conversation actors created from now on."""
        if idle_ttl_s is not None:
            self.settings_env["WONDER_CONVERSATION_IDLE_TTL_S"] = str(idle_ttl_s)
        return super().configure(max_resident)


def directory() -> Any:
    """The conversation directory actor (get-or-create; cached per process)."""
    global _directory
    if _directory is None:
        settings = Settings()
        _directory = named_detached(
            ConversationDirectoryActor,
            DIRECTORY_NAME,
            settings.max_resident_conversations,
            wonder_env(),
        )
    return _directory


def operations_runner() -> Any:
    """The async operations runner actor (get-or-create; cached per process)."""
    global _runner
    if _runner is None:
        from actors.operations_runner import RUNNER_NAME, AsyncOperationRunner

        _runner = named_detached(AsyncOperationRunner, RUNNER_NAME)
    return _runner


async def _call(conversation_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
    replace = False
    for attempt in range(4):
        handle = await directory().activate.remote(conversation_id, replace)
        try:
            return await getattr(handle, method).remote(*args, **kwargs)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Hibernating) and attempt < 3:
                replace = True
                continue
            if isinstance(cause, WonderError):
                raise cause from None
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            if attempt >= 3:
                raise
            replace = True
    raise NonRetryableError(f"conversation {conversation_id} could not be reached")


async def post_message(
    conversation_id: str,
    content: str,
    author: str,
    *,
    source: str = "human",
    reply_to_message_id: str | None = None,
    message_id: str | None = None,
    agent_id: str | None = None,
) -> JsonObject:
    """Persist a user message, start its turn; returns ``{turn_id, message_id, seq, queued}``."""
    result: JsonObject = await _call(
        conversation_id,
        "post_message",
        content,
        author,
        message_id=message_id or new_id("msg"),
        source=source,
        reply_to_message_id=reply_to_message_id,
        agent_id=agent_id,
    )
    return result


async def run_agent_turn(conversation_id: str, turn_id: str) -> JsonObject:
    """Run a turn its creator already wrote (a delegated child's first turn) and answer."""
    result: JsonObject = await _call(conversation_id, "run_agent_turn", turn_id)
    return result


async def deliver_operation(conversation_id: str, op_id: str) -> bool:
    delivered: bool = await _call(conversation_id, "deliver_operation", op_id)
    return delivered


async def cancel_turn(conversation_id: str, turn_id: str, reason: str = "cancelled") -> JsonObject:
    result: JsonObject = await _call(conversation_id, "cancel_turn", turn_id, reason)
    return result


async def add_participant(conversation_id: str, agent_id: str) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "add_participant", agent_id)
    return result


async def remove_participant(conversation_id: str, agent_id: str) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "remove_participant", agent_id)
    return result


async def set_policy(conversation_id: str, policy: str) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "set_policy", policy)
    return result


async def start_agent_call(
    conversation_id: str, input: str, caller: JsonObject, mode: str = "delegate"
) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "start_agent_call", input, caller, mode)
    return result


async def wait_for_turn(conversation_id: str, turn_id: str, timeout_s: float = 300.0) -> JsonObject:
    """Wait for a turn to leave ``active``; returns ``{turn_id, status, failure_reason}``."""
    result: JsonObject = await _call(conversation_id, "wait_for_turn", turn_id, timeout_s)
    return result


async def complete_conversation(conversation_id: str) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "complete")
    return result


async def conversation_status(conversation_id: str) -> JsonObject:
    result: JsonObject = await _call(conversation_id, "status")
    return result


async def stream_events(conversation_id: str, after_seq: int = 0) -> AsyncIterator[JsonObject]:
    """Events after ``after_seq``, then live ones, until the caller stops iterating.

    If the actor dies or is evicted while streaming, the stream resumes from the last ``seq``
    it delivered on a re-activated actor, so the caller sees no gap and no duplicate.
    """
    last = after_seq
    replace = False
    for attempt in range(4):
        handle = await directory().activate.remote(conversation_id, replace)
        # Backpressure: the actor runs at most a few events ahead of this consumer, so a slow
        # consumer's tokens wait in the actor's queue, where they are coalesced.
        generator = handle.events.options(
            num_returns="streaming", _generator_backpressure_num_objects=BACKPRESSURE_EVENTS
        ).remote(last)
        try:
            async for ref in generator:
                event: JsonObject = await ref
                if event.get("seq") is not None:
                    last = int(event["seq"])
                yield event
            return
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc.cause, Hibernating) or attempt == 3:
                raise
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            if attempt == 3:
                raise
        finally:
            ray.cancel(generator)
        replace = True


async def stop_conversations(conversation_ids: list[str]) -> None:
    """Stop the live actors of conversations about to be deleted (their turns are cancelled)."""
    for conversation_id in conversation_ids:
        await directory().drop.remote(conversation_id)


async def release_idle(conversation_id: str) -> bool:
    """Ask the directory to evict an idle conversation (called by the actor's idle watchdog)."""
    released: bool = await directory().release_idle.remote(conversation_id)
    return released


async def directory_stats() -> JsonObject:
    stats: JsonObject = await directory().stats.remote()
    return stats


async def configure_directory(
    max_resident: int | None = None, idle_ttl_s: float | None = None
) -> JsonObject:
    stats: JsonObject = await directory().configure.remote(max_resident, idle_ttl_s)
    return stats
