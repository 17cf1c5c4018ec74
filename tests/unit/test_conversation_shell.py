"""The Conversation actor's shell in one process, over its real collaborators (store, executor,
async-operations runner, scripted models) handed in as ports: no Ray. Each test drives real actors
through ``tests.inprocess.InProcessCluster``; the Ray adapters are tested in tests/integration."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.conversation import actor as actor_module
from actors.conversation import intake, steps
from actors.conversation.log import token_event
from core.domain import (
    ConcurrencyPolicy,
    MessageRole,
    OperationStatus,
    TaskAction,
    TaskDef,
    Tool,
    TurnStatus,
)
from core.errors import InvalidInput
from core.ids import new_id, new_id_after, utc_now
from core.ports import MessageAck
from core.retry import RetryPolicy
from core.store import Store
from core.store.library import SYSTEM
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessCluster]:
    monkeypatch.setattr(steps, "LLM_CALL", RetryPolicy(3, (0.01, 0.01), 5.0))
    monkeypatch.setattr(steps, "CONTEXT_ASSEMBLY", RetryPolicy(3, (0.01, 0.01), 5.0))
    monkeypatch.setattr(steps, "MEMORY_EXTRACTION", RetryPolicy(3, (0.01, 0.01), 5.0))
    cluster = InProcessCluster({"WONDER_DATA_DIR": str(tmp_path), "WONDER_EMBEDDER": "local"})
    yield cluster
    cluster.close()


def conversation(store: Store, script: list[dict[str, Any]] | None, **persona: Any) -> str:
    client_id, _key = make_client(store)
    tools = persona.pop("tools", None)
    agent = make_agent(store, client_id, scripted_profile(store, script), tools, **persona)
    return make_conversation(store, client_id, agent).id


async def ended(cluster: InProcessCluster, turn_id: str) -> TurnStatus:
    def status() -> TurnStatus | None:
        found = cluster.store.turns.get(turn_id).status
        return None if found is TurnStatus.ACTIVE else found

    return await async_wait_for(status, timeout=20)


def event_types(store: Store, conversation_id: str) -> list[str]:
    events = store.events.list(conversation_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free, always
    return [e.type for e in events]


async def test_a_turn_streams_and_completes(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "hello there"}])
    stream = cluster.stream_events(conv, 0)
    assert (await anext(stream))["type"] == "conversation_started"  # subscribed from here on
    ack = await cluster.post_message(conv, "hi", "user-1")
    seen: list[dict[str, Any]] = []
    async for event in stream:
        seen.append(event)
        if event["type"] == "turn.completed":
            break
    assert "".join(e["delta"] for e in seen if e["type"] == "token") == "hello there"
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert event_types(cluster.store, conv) == [
        "conversation_started",
        "turn.started",
        "message",
        "move",
        "message",
        "turn.completed",
    ]


async def test_a_failing_model_is_retried_then_fails_the_turn(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"fail": "model down"}])
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.FAILED
    turn = cluster.store.turns.get(ack.turn_id)
    assert turn.failure_reason == "model down"
    assert event_types(cluster.store, conv)[-1] == "turn.failed"


async def test_an_async_tool_is_answered_on_the_same_turn(cluster: InProcessCluster) -> None:
    report = task_tool(
        cluster.store,
        "report",
        [{"kind": "python", "params": {"callable": "library.callables:calculate"}}],
        schema={"type": "object", "properties": {"expression": {"type": "string"}}},
        **{"async": True},
    )
    # Rule-style: a follow-up is a fresh model loop, so each call answers by its last message.
    script = [
        {
            "match": "compute",
            "tool_calls": [{"name": "report", "arguments": {"expression": "6*7"}}],
        },
        {"match": "dispatched", "reply": "on it"},
        {"match": "[background result]", "reply": "the result is {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[report])
    ack = await cluster.post_message(conv, "compute", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED
    answers = [m.content for m in cluster.store.messages.list(conv) if m.role is MessageRole.AGENT]
    assert answers[0] == "on it" and "[background result] report" in answers[1]
    # The result may land before "on it" is out (then the turn never waits): either way, once.
    assert event_types(cluster.store, conv).count("operation.delivered") == 1
    # What the console shows of it: the operation and its call, then how it ended.
    started, delivered = (
        e.payload
        for e in cluster.store.events.list(conv)
        if e.type in ("operation.started", "operation.delivered")
    )
    assert started == {
        "turn_id": ack.turn_id,
        "operation_id": op.id,
        "tool": "report",
        "tool_call_id": op.tool_call_id,
    }
    assert delivered == {"turn_id": ack.turn_id, "operation_id": op.id, "success": True}


async def test_an_async_delegation_names_its_agent_then_its_child_conversation(
    cluster: InProcessCluster,
) -> None:
    host_script = [
        {"match": "[background result]", "reply": "the expert said: {{last_user}}"},
        {
            "match": "ask",
            "tool_calls": [{"name": "ask_expert", "arguments": {"input": "is it sound?"}}],
        },
        {"match": "dispatched", "reply": "asked"},
    ]
    conv, expert = expert_and_host(cluster, "delegate", host_script, is_async=True)
    ack = await cluster.post_message(conv, "ask the expert", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    client_id = cluster.store.conversations.get(conv).client_id
    [child] = cluster.store.conversations.list(client_id, parent_id=conv)
    payloads = {e.type: e.payload for e in cluster.store.events.list(conv)}
    assert payloads["operation.started"] == {
        "turn_id": ack.turn_id,
        "operation_id": op.id,
        "tool": "ask_expert",
        "tool_call_id": op.tool_call_id,
        "agent_id": expert,
        "mode": "delegate",
    }
    assert payloads["operation.delivered"] == {
        "turn_id": ack.turn_id,
        "operation_id": op.id,
        "success": True,
        "child_conversation_id": child.id,
    }


async def test_a_new_incarnation_resumes_a_turn_cut_mid_model_call(
    cluster: InProcessCluster,
) -> None:
    conv = conversation(cluster.store, [{"reply": "too late", "delay_s": 30}])
    ack = await cluster.post_message(conv, "this must survive", "user-1")
    await asyncio.sleep(0.05)
    _use_profile(cluster.store, conv, scripted_profile(cluster.store))  # a fast model now
    cluster.crash(conv)  # constructed on the running loop: it recovers without being called
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    answers = [m.content for m in cluster.store.messages.list(conv) if m.role is MessageRole.AGENT]
    assert answers == ["echo: this must survive"]
    assert event_types(cluster.store, conv).count("turn.resumed") == 1


def _use_profile(store: Store, conversation_id: str, profile: Any) -> None:
    agent = store.agents.get(store.conversations.get(conversation_id).agent_id or "")
    assert agent.persona_ref is not None
    persona = store.personas.get(agent.persona_ref.id)
    store.personas.put(persona.model_copy(update={"model_profile_id": profile.id}), utc_now())


def _counting_tool(store: Store, idempotent: bool) -> Tool:
    return task_tool(
        store,
        "count",
        [{"kind": "python", "params": {"callable": "tests.callables:count_then_wait"}}],
        idempotent=idempotent,
    )


RESUMED_SCRIPT = [
    {"match": "restarted before its result", "reply": "it was interrupted, not retrying"},
    {"match": "runs", "reply": "done: {{last_tool}}"},
]


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-idempotent", "idempotent"])
async def test_a_tool_call_cut_by_a_crash_reruns_only_when_idempotent(
    cluster: InProcessCluster, tmp_path: Path, idempotent: bool
) -> None:
    effects = tmp_path / "effects"
    call = {"name": "count", "arguments": {"path": str(effects), "seconds": 30}}
    script = [{"match": "go", "tool_calls": [call]}, *RESUMED_SCRIPT]
    conv = conversation(cluster.store, script, tools=[_counting_tool(cluster.store, idempotent)])
    ack = await cluster.post_message(conv, "go", "user-1")
    await async_wait_for(effects.exists, timeout=10)
    cluster.crash(conv)
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    answers = [m.content for m in cluster.store.messages.list(conv) if m.role is MessageRole.AGENT]
    [move, _answer] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None
    if idempotent:
        assert len(effects.read_text().splitlines()) == 2
        assert move.tool_result.success and answers == ['done: {"runs": 2}']
    else:
        assert len(effects.read_text().splitlines()) == 1  # not run twice
        assert not move.tool_result.success and answers == ["it was interrupted, not retrying"]
    types = event_types(cluster.store, conv)
    assert types.count("turn.resumed") == 1 and types.count("turn.completed") == 1


async def test_a_completed_operation_is_delivered_by_the_next_incarnation(
    cluster: InProcessCluster,
) -> None:
    slow = task_tool(
        cluster.store,
        "slow",
        [{"kind": "python", "params": {"callable": "library.callables:sleep"}}],
        **{"async": True},
    )
    script = [
        {"match": "go", "tool_calls": [{"name": "slow", "arguments": {"seconds": 0.3}}]},
        {"match": "dispatched", "reply": "started"},
        {"match": "[background result]", "reply": "done: {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[slow])
    ack = await cluster.post_message(conv, "go", "user-1")

    def awaiting() -> bool:
        return cluster.store.turns.get(ack.turn_id).awaiting_operations

    await async_wait_for(awaiting, timeout=10)
    cluster.crash(conv)  # the result lands while the conversation restarts
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED
    assert event_types(cluster.store, conv).count("operation.delivered") == 1


async def test_an_operation_never_handed_to_the_runner_is_handed_over_on_recovery(
    cluster: InProcessCluster, tmp_path: Path
) -> None:
    """Its actor died after recording the operation and before the runner took it (a lost
    node): the next incarnation hands it over (it never ran), instead of calling it lost."""
    runs = tmp_path / "runs"
    record = task_tool(
        cluster.store,
        "record",
        [{"kind": "python", "params": {"callable": "tests.callables:record_then_wait"}}],
        **{"async": True},
    )
    script = [
        {"match": "go", "tool_calls": [{"name": "record", "arguments": {"path": str(runs)}}]},
        {"match": "dispatched", "reply": "started"},
        {"match": "[background result]", "reply": "done: {{last_user}}"},
    ]
    conv = conversation(cluster.store, script, tools=[record])
    cluster.lost_starts = 1
    ack = await cluster.post_message(conv, "go", "user-1")
    await async_wait_for(lambda: cluster.store.turns.get(ack.turn_id).awaiting_operations, 10)
    [op] = cluster.store.async_operations.list(conv)
    assert op.started_at is None and not runs.exists()  # recorded, never handed over
    cluster.crash(conv)
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [op] = cluster.store.async_operations.list(conv)
    assert op.status is OperationStatus.DELIVERED and op.started_at is not None
    assert op.result is not None and op.result.success
    assert runs.read_text().count("ran") == 1
    assert event_types(cluster.store, conv).count("operation.delivered") == 1


async def test_cancel_closes_the_open_tool_call(cluster: InProcessCluster) -> None:
    slow = task_tool(
        cluster.store,
        "wait",
        [{"kind": "python", "params": {"callable": "library.callables:sleep"}}],
    )
    script = [{"tool_calls": [{"name": "wait", "arguments": {"seconds": 30}}]}]
    conv = conversation(cluster.store, script, tools=[slow])
    ack = await cluster.post_message(conv, "go", "user-1")
    await async_wait_for(lambda: "acting" in str(cluster.actors[conv].state.turns), timeout=10)
    outcome = await cluster.cancel_turn(conv, ack.turn_id, "stop")
    assert outcome.status is TurnStatus.FAILED and outcome.failure_reason == "stop"
    [move] = cluster.store.moves.list(ack.turn_id)
    assert move.tool_result is not None and move.tool_result.error is not None
    assert move.tool_result.error.message == "the turn was cancelled: stop"


async def test_the_queue_policy_runs_turns_one_after_the_other(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}", "delay_s": 0.2}])
    await cluster.set_policy(conv, ConcurrencyPolicy.QUEUE)
    first = await cluster.post_message(conv, "one", "user-1")
    second = await cluster.post_message(conv, "two", "user-1")
    assert not first.queued and second.queued
    assert await ended(cluster, second.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.turns.get(first.turn_id).completed_at <= (  # type: ignore[operator]
        cluster.store.turns.get(second.turn_id).started_at
    )


async def test_a_failing_hook_fails_the_turn_and_says_so(cluster: InProcessCluster) -> None:
    broken = task_tool(
        cluster.store, "broken", [{"kind": "python", "params": {"callable": "library.nope:x"}}]
    )
    conv = conversation(
        cluster.store, [{"reply": "never"}], context_assembly_task_id=broken.target_id
    )
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.FAILED
    turn = cluster.store.turns.get(ack.turn_id)
    assert turn.issues.context_assembly_failed
    assert turn.failure_reason is not None and turn.failure_reason.startswith("context assembly")
    assert "context_assembly.failed" in event_types(cluster.store, conv)


async def test_a_failing_extraction_keeps_the_answer(cluster: InProcessCluster) -> None:
    broken = task_tool(
        cluster.store, "broken", [{"kind": "python", "params": {"callable": "library.nope:x"}}]
    )
    conv = conversation(
        cluster.store, [{"reply": "kept"}], memory_extraction_task_id=broken.target_id
    )
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    await async_wait_for(lambda: extraction_settled(cluster, ack.turn_id), timeout=20)
    assert cluster.store.turns.get(ack.turn_id).issues.memory_extraction_failed
    assert cluster.store.messages.list(conv)[-1].content == "kept"
    # Extraction runs after the turn completed (seed 001): its failure comes after.
    types = event_types(cluster.store, conv)
    assert types.index("turn.completed") < types.index("memory_extraction.failed")


def extraction_settled(cluster: InProcessCluster, turn_id: str) -> bool:
    return not cluster.store.turns.get(turn_id).issues.memory_extraction_pending


@pytest.fixture
def paced(tmp_path: Path) -> Iterator[Any]:
    """``paced(quiet_s, max_wait_s)``: an in-process cluster whose extractions wait that way."""
    made: list[InProcessCluster] = []

    def make(quiet_s: float, max_wait_s: float) -> InProcessCluster:
        env = {
            "WONDER_DATA_DIR": str(tmp_path / f"data{len(made)}"),
            "WONDER_EMBEDDER": "local",
            "WONDER_EXTRACTION_QUIET_S": str(quiet_s),
            "WONDER_EXTRACTION_MAX_WAIT_S": str(max_wait_s),
        }
        made.append(InProcessCluster(env))
        return made[-1]

    yield make
    for cluster in made:
        cluster.close()


def extracting_conversation(store: Store, script: list[dict[str, Any]]) -> str:
    """A conversation whose extraction hook stores the id of the turn it ran for."""
    extract = task_tool(
        store, "ext", [{"kind": "context.set", "params": {"key": "ran", "value": "{{turn_id}}"}}]
    )
    return conversation(store, script, memory_extraction_task_id=extract.target_id)


async def test_extractions_wait_while_the_conversation_keeps_talking(paced: Any) -> None:
    """Turns one after another: each completed turn's extraction waits (pending in the store,
    so a stop meanwhile leaves it to the next incarnation); the actor is not idle meanwhile."""
    cluster = paced(quiet_s=60, max_wait_s=60)
    conv = extracting_conversation(
        cluster.store, [{"reply": "one"}, {"reply": "two"}, {"reply": "three"}]
    )
    turns = []
    for text in ("a", "b", "c"):
        ack = await cluster.post_message(conv, text, "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
        turns.append(ack.turn_id)
    actor = cluster.actors[conv]
    assert cluster.store.context.get(conv, "ran") is None  # none ran
    assert sorted(p.turn_id for p in cluster.store.pending_extractions.list(conv)) == sorted(turns)
    assert (await actor.status())["extracting"] == sorted(turns)
    assert not actor.is_idle()


async def test_waiting_extractions_run_oldest_first_once_no_turn_runs(paced: Any) -> None:
    """Two turns at once: the first to complete does not extract while the other's model call
    runs; once that one is over and the conversation quiet, both run, oldest first."""
    cluster = paced(quiet_s=0.3, max_wait_s=60)
    conv = extracting_conversation(
        cluster.store,
        [
            {"match": "quick", "reply": "done", "delay_s": 0.3},
            {"match": "slow", "reply": "done", "delay_s": 2.5},
        ],
    )
    acks = [await cluster.post_message(conv, text, "user-1") for text in ("quick", "slow")]
    for ack in acks:
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    first, last = sorted(acks, key=lambda a: cluster.store.turns.get(a.turn_id).completed_at)
    assert cluster.store.context.get(conv, "ran") is None  # the first waited for the other
    await async_wait_for(lambda: extraction_settled(cluster, first.turn_id), timeout=20)
    await async_wait_for(lambda: extraction_settled(cluster, last.turn_id), timeout=20)
    assert cluster.store.context.get(conv, "ran") == last.turn_id  # run last: oldest first
    assert cluster.actors[conv].state.extracting == {}


async def test_deleting_the_conversation_starts_none_of_its_waiting_extractions(
    paced: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation being deleted cancels the extraction running and starts none of those
    still waiting (their turns go with it)."""
    runs = tmp_path / "extractions"
    monkeypatch.setenv("WONDER_TEST_EXTRACTIONS", str(runs))
    cluster = paced(quiet_s=0.2, max_wait_s=60)
    slow = task_tool(
        cluster.store,
        "extract",
        [{"kind": "python", "params": {"callable": "tests.callables:extract_once_slowly"}}],
    )
    conv = conversation(
        cluster.store,
        [{"reply": "one"}, {"reply": "two"}],
        memory_extraction_task_id=slow.target_id,
    )
    turns = []
    for text in ("a", "b"):
        ack = await cluster.post_message(conv, text, "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
        turns.append(ack.turn_id)
    # The first waited for quiet, then started (and hangs); the second waits its turn.
    await async_wait_for(lambda: runs.exists() and runs.read_text().split(), timeout=20)
    actor = cluster.actors[conv]
    await actor.shutdown()
    await asyncio.sleep(1.0)  # what a started extraction would have written by now
    assert runs.read_text().split() == [turns[0]]


async def test_an_extraction_that_waited_too_long_runs_beside_a_turn(paced: Any) -> None:
    """A conversation that never quiets still gets its memories: an extraction that waited
    ``extraction_max_wait_s`` runs while another turn's model call is running."""
    cluster = paced(quiet_s=60, max_wait_s=0.3)
    conv = extracting_conversation(
        cluster.store,
        [{"match": "quick", "reply": "done"}, {"match": "slow", "reply": "done", "delay_s": 3.0}],
    )
    quick = await cluster.post_message(conv, "quick", "user-1")
    assert await ended(cluster, quick.turn_id) is TurnStatus.COMPLETED
    slow = await cluster.post_message(conv, "slow", "user-1")
    await async_wait_for(
        lambda: cluster.store.context.get(conv, "ran") == quick.turn_id, timeout=20
    )
    assert cluster.store.turns.get(slow.turn_id).status is TurnStatus.ACTIVE
    assert await ended(cluster, slow.turn_id) is TurnStatus.COMPLETED


async def test_an_extraction_cut_by_a_crash_runs_again(
    cluster: InProcessCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn completes with its extraction recorded as pending; an actor that dies before
    the extraction ends leaves it pending, and its next incarnation runs it."""
    runs = tmp_path / "extractions"
    monkeypatch.setenv("WONDER_TEST_EXTRACTIONS", str(runs))
    slow = task_tool(
        cluster.store,
        "extract",
        [{"kind": "python", "params": {"callable": "tests.callables:extract_once_slowly"}}],
    )
    conv = conversation(
        cluster.store, [{"reply": "done"}], memory_extraction_task_id=slow.target_id
    )
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    await async_wait_for(runs.exists, timeout=10)
    assert cluster.store.turns.get(ack.turn_id).issues.memory_extraction_pending
    assert [p.turn_id for p in cluster.store.pending_extractions.list(conv)] == [ack.turn_id]
    cluster.crash(conv)
    await async_wait_for(lambda: extraction_settled(cluster, ack.turn_id), timeout=20)
    assert runs.read_text().splitlines() == [ack.turn_id, ack.turn_id]
    assert cluster.store.pending_extractions.list(conv) == []
    turn = cluster.store.turns.get(ack.turn_id)
    assert turn.status is TurnStatus.COMPLETED and not turn.issues.memory_extraction_failed
    assert event_types(cluster.store, conv).count("turn.completed") == 1


# --------------------------------------------------------------------------- acknowledged elsewhere


async def collect_until(stream: Any, event_type: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async for event in stream:
        seen.append(event)
        if event["type"] == event_type:
            return seen
    return seen


async def test_a_message_acknowledged_before_its_actor_exists_is_answered(
    cluster: InProcessCluster,
) -> None:
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}"}])
    stream = cluster.stream_events(conv, 0)  # following needs no actor, and starts none
    assert (await anext(stream))["type"] == "conversation_started"
    ack = cluster.intake.acknowledge(conv, "hello", "user-1", message_id=new_id("msg"))
    assert ack is not None and conv not in cluster.actors
    assert cluster.store.turns.get(ack.turn_id).started_at is None  # stored, not started
    cluster.actor(conv)  # activated (as the directory admits it): recovery picks the turn up
    seen = await collect_until(stream, "turn.completed")
    assert [e["seq"] for e in seen if e.get("seq")] == list(
        range(2, len(event_types(cluster.store, conv)) + 1)
    )
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.messages.list(conv)[-1].content == "answer to hello"


async def test_the_actor_picks_up_a_message_acknowledged_before_it_started(
    cluster: InProcessCluster,
) -> None:
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}"}])
    stream = cluster.stream_events(conv, 0)
    assert (await anext(stream))["type"] == "conversation_started"
    ack = cluster.intake.acknowledge(conv, "late", "user-1", message_id=new_id("msg"))
    assert ack is not None
    # The caller's own call reaches the actor: it finds the message stored and starts the turn.
    again = await cluster.post_message(conv, "late", "user-1", message_id=ack.message_id)
    assert (again.turn_id, again.seq) == (ack.turn_id, ack.seq)
    seen = await collect_until(stream, "turn.completed")
    seqs = [e["seq"] for e in seen if e.get("seq")]
    assert seqs == list(range(2, seqs[-1] + 1))  # the other writer's events too, in order
    assert seen[0]["type"] == "turn.started" and seen[1]["type"] == "message"
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED


async def test_a_first_send_that_was_stored_already_is_answered_as_a_retry(
    cluster: InProcessCluster,
) -> None:
    """``first_send`` skips the store read of a retry: a caller that got it wrong (or an id made
    twice) still stores the message once, and the duplicate gets the first one's ack."""
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}"}])
    actor = cluster.actor(conv)
    message_id = new_id("msg")
    first = await actor.post_message("once", "user-1", message_id=message_id, first_send=True)
    assert await ended(cluster, first.turn_id) is TurnStatus.COMPLETED
    again = await actor.post_message("once", "user-1", message_id=message_id, first_send=True)
    assert (again.turn_id, again.message_id, again.seq) == (
        first.turn_id,
        first.message_id,
        first.seq,
    )
    stored = [m for m in cluster.store.messages.list(conv) if m.role is MessageRole.USER]
    assert [m.id for m in stored] == [message_id]
    assert len(cluster.store.turns.list(conv)) == 1


async def test_while_its_actor_holds_the_log_no_one_else_appends(
    cluster: InProcessCluster,
) -> None:
    """One writer at a time: an idle conversation whose actor is resident is not acknowledged
    in the store (the message goes to the actor); once the actor hibernates it is again."""
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}"}])
    actor = cluster.actor(conv)
    await asyncio.sleep(0.05)
    assert cluster.intake.acknowledge(conv, "one", "user-1", message_id=new_id("msg")) is None
    assert cluster.store.messages.list(conv) == []
    ack = await cluster.post_message(conv, "one", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    await async_wait_for(lambda: cluster.idle_noted == [conv])  # told the directory it is idle
    assert await actor.try_hibernate()
    later = cluster.intake.acknowledge(conv, "two", "user-1", message_id=new_id("msg"))
    assert later is not None
    assert [m.content for m in cluster.store.messages.list(conv)] == [
        "one",
        "answer to one",
        "two",
    ]


async def test_a_busy_conversation_is_left_to_its_actor(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "slow", "delay_s": 1}])
    first = await cluster.post_message(conv, "one", "user-1")
    message_id = new_id("msg")
    assert cluster.intake.acknowledge(conv, "two", "user-1", message_id=message_id) is None
    assert [m.id for m in cluster.store.messages.list(conv)] == [first.message_id]
    assert await ended(cluster, first.turn_id) is TurnStatus.COMPLETED


async def test_no_turn_is_stored_between_the_actors_parent_read_and_its_write(
    cluster: InProcessCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor holds the log: an acknowledgement tried between its read of a new turn's parent
    and its write is refused, so its turns never fork off one stored meanwhile."""
    conv = conversation(cluster.store, [{"reply": "answer to {{last_user}}"}])
    first = await cluster.post_message(conv, "one", "user-1")
    assert await ended(cluster, first.turn_id) is TurnStatus.COMPLETED
    interleaved: list[MessageAck | None] = []

    def parent_then_an_intake(store: Store, conversation_id: str, reply_to: str | None) -> Any:
        parent = intake.parent_turn(store, conversation_id, reply_to)
        if not interleaved:  # the caller tries to acknowledge another message meanwhile
            ack = cluster.intake.acknowledge(conv, "two", "user-1", message_id=new_id("msg"))
            interleaved.append(ack)
        return parent

    monkeypatch.setattr(actor_module, "parent_turn", parent_then_an_intake)
    third = await cluster.post_message(conv, "three", "user-1")
    assert interleaved == [None]
    assert await ended(cluster, third.turn_id) is TurnStatus.COMPLETED
    turns = cluster.store.turns.list(conv)  # in id order
    assert [t.id for t in turns] == [first.turn_id, third.turn_id]
    assert [t.parent_turn_id for t in turns] == [None, first.turn_id]


def test_an_id_made_after_another_sorts_after_it() -> None:
    later = "turn_7ZZZZZZZZZ" + "0" * 16  # the largest timestamp ULIDs hold: a clock far ahead
    assert new_id_after("turn", later) > later
    assert new_id_after("turn", None).startswith("turn_")
    made = new_id("turn")
    assert new_id_after("turn", made) > made


async def test_a_refused_message_is_refused_without_the_actor(cluster: InProcessCluster) -> None:
    conv = conversation(cluster.store, [{"reply": "x"}])
    with pytest.raises(InvalidInput):
        cluster.intake.acknowledge(conv, "hi", "u", message_id=new_id("msg"), agent_id="nobody")
    assert cluster.store.messages.list(conv) == []


async def test_an_actor_started_before_its_conversation_binds_on_its_first_call(
    cluster: InProcessCluster,
) -> None:
    reserved = new_id("conv")
    cluster.actor(reserved)  # the directory's reserve: no conversation yet
    await asyncio.sleep(0.05)
    client_id, _key = make_client(cluster.store)
    agent = make_agent(cluster.store, client_id, scripted_profile(cluster.store, [{"reply": "hi"}]))
    make_conversation(cluster.store, client_id, agent, conversation_id=reserved)
    ack = await cluster.post_message(reserved, "hello", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.messages.list(reserved)[-1].content == "hi"


# --------------------------------------------------------------------------- hooks


async def test_a_hook_assembles_the_request_the_model_sees(cluster: InProcessCluster) -> None:
    """The library's example hook (a real task, run by the executor) reorders history and adds an
    index; the model answers with what it was sent."""
    hook = task_tool(
        cluster.store,
        "reorder",
        [{"kind": "python", "params": {"callable": "library.adapters:newest_first_with_index"}}],
    )
    conv = conversation(
        cluster.store,
        [{"reply": "CONTEXT {{context}} HISTORY {{history}}"}],
        context_assembly_task_id=hook.target_id,
    )
    for text in ("alpha", "beta"):
        ack = await cluster.post_message(conv, text, "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    answer = cluster.store.messages.list(conv)[-1].content
    context, history = answer.split(" HISTORY ", 1)
    assert "Index of earlier questions:\n1. alpha" in context
    assert history.split(" | ")[0] == "alpha" and history.split(" | ")[-1] == "beta"


async def test_hook_runs_are_stored_on_the_turn_and_settled_extractions_together(
    cluster: InProcessCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context hook's run is stored on the turn with its answer (the way to the model has no
    write of its own); settled extractions are stored together after ``SETTLE_BATCH_S``, and the
    actor is not idle (so not evicted) while it holds any."""
    monkeypatch.setattr(actor_module, "SETTLE_BATCH_S", 1.0)
    store = cluster.store
    context = task_tool(store, "ctx", [{"kind": "context.get", "params": {"key": "notes"}}])
    extract = task_tool(
        store, "ext", [{"kind": "context.set", "params": {"key": "k", "value": "{{turn_id}}"}}]
    )
    conv = conversation(
        store,
        [{"reply": "one"}, {"reply": "two"}],
        context_assembly_task_id=context.target_id,
        memory_extraction_task_id=extract.target_id,
    )
    turns = []
    for text in ("a", "b"):
        ack = await cluster.post_message(conv, text, "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
        turns.append(ack.turn_id)
    actor = cluster.actors[conv]
    await async_wait_for(lambda: not actor.state.extracting, timeout=10)
    # Both extractions ran; neither is stored as settled yet, and the actor says it is busy.
    assert all(store.turns.get(t).issues.memory_extraction_pending for t in turns)
    assert not actor.is_idle()
    await async_wait_for(lambda: all(extraction_settled(cluster, t) for t in turns), timeout=10)
    assert store.pending_extractions.list(conv) == []
    assert actor.is_idle()
    runs = [store.turns.get(t) for t in turns]
    assert all(r.context_assembly_run_id and r.memory_extraction_run_id for r in runs)
    assert len({r.context_assembly_run_id for r in runs}) == 2


async def test_an_edit_to_the_persona_or_a_hook_task_holds_from_the_next_turn(
    cluster: InProcessCluster,
) -> None:
    """The actor keeps the agent's setup and hook tasks between turns (issue 10); a new version
    of the persona or of a hook task, or a client's own task shadowing the system's, is what
    the next turn runs."""
    store = cluster.store

    def hook(task_id: str, value: str, owner: str = SYSTEM) -> None:
        actions = [
            TaskAction(kind="context.set", params={"key": "said", "value": value}),
            TaskAction(kind="python", params={"callable": "tests.callables:previous_as_context"}),
        ]
        store.tasks.put(TaskDef(id=task_id, actions=actions), utc_now(), owner=owner)

    def extraction(task_id: str, value: str) -> None:
        action = TaskAction(kind="context.set", params={"key": "extracted", "value": value})
        store.tasks.put(TaskDef(id=task_id, actions=[action]), utc_now())

    assembly_id, extraction_id = f"assemble-{new_id().lower()}", f"extract-{new_id().lower()}"
    hook(assembly_id, "hook v1")
    extraction(extraction_id, "x1")
    conv = conversation(
        store,
        [{"reply": "{{context}}"}] * 3,
        system_prompt="prompt v1",
        context_assembly_task_id=assembly_id,
        memory_extraction_task_id=extraction_id,
    )

    async def turn() -> str:
        ack = await cluster.post_message(conv, "hi", "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
        await async_wait_for(lambda: extraction_settled(cluster, ack.turn_id), timeout=20)
        return store.messages.list(conv)[-1].content

    first = await turn()
    assert "prompt v1" in first and "hook v1" in first
    assert store.context.get(conv, "extracted") == "x1"

    agent = store.agents.get(store.conversations.get(conv).agent_id or "")
    persona = store.personas.get(agent.persona_ref.id)  # type: ignore[union-attr]
    store.personas.put(persona.model_copy(update={"system_prompt": "prompt v2"}), utc_now())
    hook(assembly_id, "hook v2")
    extraction(extraction_id, "x2")
    second = await turn()
    assert "prompt v2" in second and "hook v2" in second and "v1" not in second
    assert store.context.get(conv, "extracted") == "x2"

    hook(assembly_id, "the client's own", owner=agent.client_id)
    assert "the client's own" in await turn()


async def test_extraction_gets_the_turns_moves(cluster: InProcessCluster) -> None:
    calc = task_tool(
        cluster.store,
        "calc",
        [{"kind": "python", "params": {"callable": "library.callables:calculate"}}],
        schema={"type": "object", "properties": {"expression": {"type": "string"}}},
    )
    remember = task_tool(
        cluster.store,
        "remember",
        [{"kind": "context.set", "params": {"key": "transcript", "value": "{{input.transcript}}"}}],
    )
    script = [
        {"tool_calls": [{"name": "calc", "arguments": {"expression": "6*7"}}]},
        {"reply": "it is 42"},
    ]
    conv = conversation(
        cluster.store, script, tools=[calc], memory_extraction_task_id=remember.target_id
    )
    ack = await cluster.post_message(conv, "what is 6*7?", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    # Extraction runs off the reply's path: the turn completes before it has written.
    transcript = await async_wait_for(
        lambda: cluster.store.context.get(conv, "transcript"), timeout=20
    )
    assert [entry["role"] for entry in transcript] == ["user", "tool_call", "agent"]
    call = transcript[1]
    assert call["name"] == "calc" and call["arguments"] == {"expression": "6*7"}
    assert call["result"] == {"expression": "6*7", "result": 42} and call["success"] is True


async def test_the_model_sees_which_message_the_user_replies_to(cluster: InProcessCluster) -> None:
    script = [
        {"match": "question one", "reply": "first answer"},
        {"match": "why?", "reply": "{{last_user}}"},
    ]
    conv = conversation(cluster.store, script)
    first = await cluster.post_message(conv, "question one", "user-1")
    assert await ended(cluster, first.turn_id) is TurnStatus.COMPLETED
    replied = cluster.store.messages.list(conv)[-1]
    second = await cluster.post_message(conv, "why?", "user-1", reply_to_message_id=replied.id)
    assert await ended(cluster, second.turn_id) is TurnStatus.COMPLETED
    seen = cluster.store.messages.list(conv)[-1].content
    assert seen == f'[in reply to {replied.author}: "first answer"]\nwhy?'
    assert cluster.store.turns.get(second.turn_id).parent_turn_id == first.turn_id


async def test_the_history_tool_reads_beyond_the_window(cluster: InProcessCluster) -> None:
    history = task_tool(
        cluster.store,
        "conversation_history",
        [{"kind": "conversation.history", "params": {"query": "{{input.query}}"}}],
        schema={"type": "object", "properties": {"query": {"type": "string"}}},
    )
    script = [  # rules: the first that matches the last message answers
        {"match": '"messages"', "reply": "found: {{last_tool}}"},
        {"match": "remember", "reply": "noted"},
        {"match": "filler", "reply": "ok"},
        {
            "match": "what was the code",
            "tool_calls": [{"name": "conversation_history", "arguments": {"query": "code is"}}],
        },
    ]
    conv = conversation(cluster.store, script, tools=[history], recent_turns_limit=1)
    for text in ("remember: the code is 4711", "filler one", "filler two", "what was the code?"):
        ack = await cluster.post_message(conv, text, "user-1")
        assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    answer = cluster.store.messages.list(conv)[-1].content
    assert answer.startswith("found: ") and "the code is 4711" in answer
    assert "filler" not in answer  # only the messages that match the query


# --------------------------------------------------------------------------- loop_in


def expert_and_host(
    cluster: InProcessCluster, mode: str, host_script: list[dict[str, Any]], is_async: bool = False
) -> tuple[str, str]:
    store = cluster.store
    client_id, _key = make_client(store)
    expert = make_agent(
        store,
        client_id,
        scripted_profile(store, [{"reply": "expert on: {{last_user}}"}]),
    )
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{new_id().lower()}",
            name="ask_expert",
            description="ask the expert",
            input_schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {"input": {"type": "string"}},
            },
            target_type="agent",
            target_id=expert.id,
            invocation_mode=mode,
            is_async=is_async,
        ),
        utc_now(),
    )
    host = make_agent(store, client_id, scripted_profile(store, host_script), [ask])
    return make_conversation(store, client_id, host).id, expert.id


async def test_a_looped_in_agent_answers_the_invitation_here_then_when_addressed(
    cluster: InProcessCluster,
) -> None:
    host_script = [  # rules: by the last message the host's model sees
        {"match": '"joined"', "reply": "the expert said: {{last_tool}}"},
        {
            "match": "bring",
            "tool_calls": [{"name": "ask_expert", "arguments": {"input": "is the plan sound?"}}],
        },
    ]
    conv, expert = expert_and_host(cluster, "loop_in", host_script)
    ack = await cluster.post_message(conv, "bring the expert", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    spoken = [(m.author, m.content) for m in cluster.store.messages.list(conv)]
    assert (expert, "expert on: is the plan sound?") in spoken  # answered in this conversation
    assert spoken[-1][1].startswith("the expert said:") and "expert on:" in spoken[-1][1]
    assert expert in {p.id for p in cluster.store.conversations.get(conv).participants}

    asked = await cluster.post_message(conv, f"@{expert} and now?", "user-1")
    assert await ended(cluster, asked.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.turns.get(asked.turn_id).agent_id == expert

    await cluster.remove_participant(conv, expert)
    after = await cluster.post_message(conv, f"@{expert} still there?", "user-1")
    assert await ended(cluster, after.turn_id) is TurnStatus.COMPLETED
    assert cluster.store.turns.get(after.turn_id).agent_id != expert  # the host answers now


async def test_a_call_may_choose_loop_in_over_the_tools_delegate(
    cluster: InProcessCluster,
) -> None:
    host_script = [
        {"match": '"joined"', "reply": "joined"},
        {
            "match": "bring",
            "tool_calls": [
                {"name": "ask_expert", "arguments": {"input": "hello", "mode": "loop_in"}}
            ],
        },
    ]
    conv, expert = expert_and_host(cluster, "delegate", host_script)
    ack = await cluster.post_message(conv, "bring the expert", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert expert in {p.id for p in cluster.store.conversations.get(conv).participants}
    assert (
        cluster.store.conversations.list(
            cluster.store.conversations.get(conv).client_id, parent_id=conv
        )
        == []
    )  # no child: not delegated


# --------------------------------------------------------------------------- declining


async def test_a_delegate_may_decline_and_its_caller_hears_agent_declined(
    cluster: InProcessCluster,
) -> None:
    store = cluster.store
    client_id, _key = make_client(store)
    refusing = [{"tool_calls": [{"name": "decline", "arguments": {"reason": "not my field"}}]}]
    expert = make_agent(store, client_id, scripted_profile(store, refusing))
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{new_id().lower()}",
            name="ask_expert",
            description="ask the expert",
            input_schema={"type": "object", "properties": {"input": {"type": "string"}}},
            target_type="agent",
            target_id=expert.id,
        ),
        utc_now(),
    )
    host_script = [
        {"match": "AGENT_DECLINED", "reply": "they said no: {{last_tool}}"},
        {
            "match": "review",
            "tool_calls": [{"name": "ask_expert", "arguments": {"input": "review this"}}],
        },
    ]
    host = make_agent(store, client_id, scripted_profile(store, host_script), [ask])
    conv = make_conversation(store, client_id, host).id
    ack = await cluster.post_message(conv, "please review", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    [move] = [m for m in store.moves.list(ack.turn_id) if m.tool_result is not None]
    assert move.tool_result is not None and move.tool_result.error is not None
    error = move.tool_result.error
    assert error.code == "AGENT_DECLINED" and not error.retriable
    assert "not my field" in error.message
    [child] = store.conversations.list(client_id, parent_id=conv)
    [child_turn] = store.turns.list(child.id)
    assert child_turn.failure_code == "AGENT_DECLINED"
    assert child_turn.failure_reason == "declined: not my field"


async def test_a_users_turn_is_not_offered_decline(cluster: InProcessCluster) -> None:
    script = [
        {"match": "NOT_FOUND", "reply": "{{last_tool}}"},
        {"match": "hi", "tool_calls": [{"name": "decline", "arguments": {"reason": "no"}}]},
    ]
    conv = conversation(cluster.store, script)
    ack = await cluster.post_message(conv, "hi", "user-1")
    assert await ended(cluster, ack.turn_id) is TurnStatus.COMPLETED
    assert "no tool named 'decline'" in cluster.store.messages.list(conv)[-1].content


async def test_a_subscriber_arriving_mid_reply_gets_the_tokens_so_far(
    cluster: InProcessCluster,
) -> None:
    conv = conversation(cluster.store, [{"reply": "x"}])
    events = cluster.events
    for delta in ("Hel", "lo"):  # a model call in flight: streamed, not yet stored
        events.publish(conv, [token_event(conv, "turn_x", delta)])
    late = cluster.stream_events(conv, 0)
    assert (await anext(late))["type"] == "conversation_started"
    assert await anext(late) == token_event(conv, "turn_x", "Hello")
    events.publish(conv, [token_event(conv, "turn_x", "!")])
    assert (await anext(late))["delta"] == "!"
    events.publish(conv, [{"seq": None, "type": "llm.retry", "turn_id": "turn_x", "attempt": 1}])
    assert (await anext(late))["type"] == "llm.retry"
    again = cluster.stream_events(conv, 0)
    assert (await anext(again))["type"] == "conversation_started"
    # a retried call starts over: nothing in flight is replayed
    events.publish(conv, [token_event(conv, "turn_x", "Hi")])
    assert (await anext(again))["delta"] == "Hi"
