"""A recorded model call's context window and its replay with another model profile (the
console's playground), read and sent through the gateway's routes.

Real Conversation actors, executor tasks and a real SQLite store in this process
(``tests.inprocess``), scripted models; the calls are recorded by the production background writer
and the routes answered by the real app (FastAPI's TestClient). The replay's model comes from the
production ``serving.models.chat_model_for``, as the gateway's ``ServedChatModels`` gives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.context_window import CHARS_PER_TOKEN, PromptCounts, context_window, split_system
from core.domain import ModelProfile, TurnStatus
from core.errors import InvalidInput, Unavailable, WonderError
from core.ids import new_id, utc_now
from core.jsontypes import JsonObject
from core.llm.protocol import ChatModel
from core.memory.context import assemble_context
from core.model_calls import ServedBy
from core.quotas import Quota
from core.recording_setup import flush_records
from serving.gateway.call_context import MAX_PROBES
from serving.models import chat_model_for
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster
from tests.recorded_gateway import gateway_client, recording_cluster
from tests.unit.test_context_window_counts import template_tokens

pytestmark = pytest.mark.timeout(60)

SCRIPT = [
    {"tool_calls": [{"name": "shout", "arguments": {"text": "hi"}}]},
    {"reply": "done: {{last_tool}}"},
]


@dataclass(frozen=True)
class ScriptedOnly:
    """``ChatModels`` for this process: the production choice for a scripted profile."""

    def for_profile(self, profile: ModelProfile, client_id: str | None = None) -> ChatModel:
        return chat_model_for(profile)

    def prewarm(self, profile: ModelProfile) -> None:
        return None


@dataclass
class WordTokenizer:
    """``PromptTokenizers`` standing in for the local deployment (which the e2e tier runs): a
    ChatML-like template counted in words; ``failure``: what it raises instead of answering."""

    failure: WonderError | None = None
    asked: list[tuple[str | None, str, int]] = field(default_factory=list)

    def count(self, deployment: str | None, model: str, bodies: list[JsonObject]) -> PromptCounts:
        self.asked.append((deployment, model, len(bodies)))
        if self.failure is not None:
            raise self.failure
        counts = [template_tokens(body) for body in bodies]
        return PromptCounts(tokenizer=model, counts=counts, max_model_len=2048)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with recording_cluster(tmp_path) as cluster:
        yield cluster


def gateway(cluster: InProcessCluster, key: str) -> TestClient:
    return gateway_client(cluster, key, ScriptedOnly())


def test_the_system_message_splits_into_prompt_memories_and_the_rest() -> None:
    assembled = assemble_context(
        [
            {"type": "fact", "content": "works on payments"},
            {"type": "preference", "content": "terse"},
        ],
        tools=[{"name": "shout", "description": "Shout it"}],
    )
    prompt, memories, rest, count = split_system(f"Be brief.\n\nAlways polite.\n\n{assembled}")
    assert prompt == "Be brief.\n\nAlways polite."
    assert "works on payments" in memories and "terse" in memories and count == 2
    assert rest.startswith("Tools you can call:") and "shout" in rest
    window = context_window(
        "call_1",
        "vllm",
        "default",
        {
            "messages": [
                {"role": "system", "content": f"Be brief.\n\n{assembled}"},
                {"role": "user", "content": "x" * 400},
            ],
            "tools": [{"type": "function", "function": {"name": "shout", "parameters": {}}}],
            "max_tokens": 64,
        },
        reported_prompt_tokens=150,
        window=4096,
    )
    by = {s.name: s for s in window.sections}
    assert by["history"].text == "user: " + "x" * 400
    assert by["history"].tokens == -(-406 // CHARS_PER_TOKEN) + 4 and by["history"].items == 1
    assert by["memories"].items == 2 and by["tool_specs"].items == 1
    assert window.total_tokens == sum(s.tokens for s in window.sections)
    assert (window.window, window.max_tokens, window.counted_by) == (4096, 64, "estimate")


async def test_context_window_and_replay_of_a_recorded_call(cluster: InProcessCluster) -> None:
    store = cluster.store
    client_id, key = make_client(store)
    other_id, other_key = make_client(store)
    shout = task_tool(
        store, "shout", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    agent = make_agent(
        store, client_id, scripted_profile(store, SCRIPT), [shout], system_prompt="Be brief."
    )
    conv = make_conversation(store, client_id, agent).id
    ack = await cluster.post_message(conv, "say hi", "user-1")

    def ended() -> TurnStatus | None:
        status = store.turns.get(ack.turn_id).status
        return None if status is TurnStatus.ACTIVE else status

    assert await async_wait_for(ended, timeout=20) is TurnStatus.COMPLETED
    flush_records()
    api = gateway(cluster, key)
    base = f"/v1/conversations/{conv}/turns/{ack.turn_id}"
    first, _second = api.get(f"{base}/calls").json()["items"]
    events_before = api.get(f"/v1/conversations/{conv}/events").json()["items"]

    # The context window: the persona's prompt, the history, the tool specs, estimated.
    got = api.get(f"{base}/calls/{first['id']}/context")
    assert got.status_code == 200, got.text
    window = got.json()
    by = {s["name"]: s for s in window["sections"]}
    assert by["system_prompt"]["text"].startswith("Be brief.")
    assert by["history"]["items"] == 1 and "say hi" in by["history"]["text"]
    assert by["tool_specs"]["items"] == 1 and '"shout"' in by["tool_specs"]["text"]
    assert window["counted_by"] == "estimate" and window["window"] is None  # scripted: unstated
    assert window["count_note"].startswith("a scripted model served the call")
    assert window["reported_prompt_tokens"] == first["usage"]["prompt_tokens"]

    # The replay: the same request to another profile's model; its answer, the original's.
    echo = scripted_profile(store)  # answers "echo: <last user message>"
    replayed = api.post(f"{base}/calls/{first['id']}/replay", json={"model_profile": echo.id})
    assert replayed.status_code == 200, replayed.text
    result = replayed.json()
    assert result["status"] == "ok" and result["response"]["content"] == "echo: say hi"
    assert result["request"]["messages"] == first["request"]["messages"]
    assert result["request"]["model"] == "echo"
    assert result["original"]["tool_calls"][0]["name"] == "shout"
    assert (result["model_profile_id"], result["provider"]) == (echo.id, "scripted")
    # Nothing written to the conversation: the same events, the turn's calls unchanged.
    flush_records()
    assert api.get(f"/v1/conversations/{conv}/events").json()["items"] == events_before
    assert len(api.get(f"{base}/calls").json()["items"]) == 2

    # Another client's ids are a 404, whatever the route; so are unknown calls and profiles.
    other = gateway(cluster, other_key)
    for path in (f"{base}/calls/{first['id']}/context", f"{base}/calls/call_nope/context"):
        assert other.get(path).status_code == 404
    assert api.get(f"{base}/calls/call_nope/context").status_code == 404
    assert (
        api.get(f"/v1/conversations/{conv}/turns/turn_nope/calls/{first['id']}/context").status_code
        == 404
    )
    body = {"model_profile": echo.id}
    assert other.post(f"{base}/calls/{first['id']}/replay", json=body).status_code == 404
    assert api.post(f"{base}/calls/call_nope/replay", json=body).status_code == 404
    missing = api.post(f"{base}/calls/{first['id']}/replay", json={"model_profile": "nope-x"})
    assert missing.status_code == 404, missing.text
    private = ModelProfile(id=f"theirs-{new_id().lower()}", provider="scripted", model="echo")
    owned = store.model_profiles.put(private, utc_now(), owner=other_id)  # the other client's
    theirs = api.post(f"{base}/calls/{first['id']}/replay", json={"model_profile": owned.id})
    assert theirs.status_code == 404, theirs.text
    # Bad bodies are 422 with the API's error shape, never a 500.
    for bad in (
        {},
        {"model_profile": ""},
        {"model_profile": echo.id, "version": 0},
        {"model_profile": echo.id, "extra": 1},
        {"model_profile": 3},
    ):
        answer = api.post(f"{base}/calls/{first['id']}/replay", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert {"code", "message", "retriable"} <= set(answer.json()["error"])

    # Quota-counted as a turn: over the day's tokens, a replay is refused (429, Retry-After).
    store.quotas.put(client_id, Quota(tokens_per_day=1), utc_now())
    api = gateway(cluster, key)
    refused = api.post(f"{base}/calls/{first['id']}/replay", json=body)
    assert refused.status_code == 429, refused.text
    assert "tokens_per_day" in refused.json()["error"]["message"]


async def test_a_local_model_call_is_counted_by_its_deployment_or_estimated_saying_why(
    cluster: InProcessCluster,
) -> None:
    store = cluster.store
    client_id, key = make_client(store)
    profile = scripted_profile(store, SCRIPT[1:])
    agent = make_agent(store, client_id, profile, [], system_prompt="Be brief.")
    conv = make_conversation(store, client_id, agent).id
    ack = await cluster.post_message(conv, "say hi", "user-1")
    assert await async_wait_for(
        lambda: store.turns.get(ack.turn_id).status is TurnStatus.COMPLETED, timeout=20
    )
    flush_records()
    [scripted] = store.records.calls(turn_ids=[ack.turn_id])
    # The same request as if the local deployment had served it.
    served = ServedBy(provider="vllm", deployment="LLMServer-smol", replica="r1")
    update = {"id": new_id("call"), "provider": "vllm", "model": "smol", "served_by": served}
    local = scripted.model_copy(update=update)
    with store.db.begin() as conn:
        store.records.insert_calls([local], conn)
    assert local.request is not None
    path = f"/v1/conversations/{conv}/turns/{ack.turn_id}/calls/{local.id}/context"

    tokenizer = WordTokenizer()
    counted = gateway_client(cluster, key, tokenizers=tokenizer).get(path)
    assert counted.status_code == 200, counted.text
    window = counted.json()
    assert (window["counted_by"], window["tokenizer"], window["count_note"]) == (
        "tokenizer",
        "smol",
        None,
    )
    assert window["total_tokens"] == template_tokens(local.request)
    assert window["total_tokens"] == sum(s["tokens"] for s in window["sections"])
    assert window["window"] == 2048
    [(deployment, model, probes)] = tokenizer.asked
    assert (deployment, model) == ("LLMServer-smol", "smol") and probes >= 2  # the one it served

    # A deployment that cannot count now, or refuses, or none at all: estimated, and said why.
    for tokenizers, note in (
        (WordTokenizer(Unavailable("the local model application is not running")), "not running"),
        (WordTokenizer(InvalidInput("the model smol is not served")), "not served"),
        (None, "no local model deployment"),
    ):
        answer = gateway_client(cluster, key, tokenizers=tokenizers).get(path)
        assert answer.status_code == 200, answer.text
        estimated = answer.json()
        assert estimated["counted_by"] == "estimate" and estimated["tokenizer"] is None
        assert note in estimated["count_note"]

    # A request split into more parts than one count may ask for is estimated, not sent.
    notes = [{"role": r, "content": r} for _ in range(MAX_PROBES) for r in ("system", "user")]
    many = local.model_copy(update={"id": new_id("call"), "request": {"messages": notes}})
    with store.db.begin() as conn:
        store.records.insert_calls([many], conn)
    tokenizer = WordTokenizer()
    answer = gateway_client(cluster, key, tokenizers=tokenizer).get(path.replace(local.id, many.id))
    assert answer.status_code == 200, answer.text
    assert "too many parts to count" in answer.json()["count_note"] and not tokenizer.asked
