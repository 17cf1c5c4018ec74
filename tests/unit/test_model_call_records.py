"""Model calls as records and turns as traces (docs/observability.md), read through the gateway.

Real Conversation actors, executor tasks and a real SQLite store in this process
(``tests.inprocess``), a scripted model; the records are written by the production background
writer (``core.record_sink``) and read over the gateway's routes (FastAPI's TestClient). The
provider test sends a real HTTP request to a listener on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from core.domain import ModelPrices, TurnStatus
from core.egress import EgressPolicy
from core.ids import utc_now
from core.llm import recording
from core.llm.openai_http import OpenAIHttpModel
from core.llm.protocol import ChatRequest, ToolSpec, complete
from core.model_calls import ModelCallRecord
from core.recording_setup import flush_records
from tests.conftest import async_wait_for
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.inprocess import InProcessCluster
from tests.recorded_gateway import gateway_client, recording_cluster
from tests.security.listener import Listening

pytestmark = pytest.mark.timeout(60)

SCRIPT = [
    {"tool_calls": [{"name": "shout", "arguments": {"text": "hi"}}]},
    {"reply": "done: {{last_tool}}"},
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with recording_cluster(tmp_path) as cluster:
        yield cluster


def gateway(cluster: InProcessCluster, key: str) -> TestClient:
    return gateway_client(cluster, key)


def names(node: dict[str, Any]) -> list[str]:
    return [node["name"], *(n for child in node["children"] for n in names(child))]


async def test_a_turns_calls_trace_and_usage_are_read_like_the_turn(
    cluster: InProcessCluster,
) -> None:
    store = cluster.store
    client_id, key = make_client(store)
    _, other_key = make_client(store)
    shout = task_tool(
        store, "shout", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    profile = scripted_profile(store, SCRIPT)
    priced = profile.model_copy(update={"prices": ModelPrices(input_per_million=100_000)})
    priced = store.model_profiles.put(priced, utc_now())
    agent = make_agent(store, client_id, priced, [shout], system_prompt="Be brief.")
    conv = make_conversation(store, client_id, agent).id
    ack = await cluster.post_message(conv, "say hi", "user-1")

    def ended() -> TurnStatus | None:
        status = store.turns.get(ack.turn_id).status
        return None if status is TurnStatus.ACTIVE else status

    assert await async_wait_for(ended, timeout=20) is TurnStatus.COMPLETED
    flush_records()
    api = gateway(cluster, key)
    base = f"/v1/conversations/{conv}/turns/{ack.turn_id}"

    calls = api.get(f"{base}/calls")
    assert calls.status_code == 200, calls.text
    first, second = calls.json()["items"]
    assert [first["source"]["step"], second["source"]["step"]] == [1, 2]
    sent = first["request"]["messages"]
    assert sent[0] == {"role": "system", "content": sent[0]["content"]}
    assert "Be brief." in sent[0]["content"]
    assert sent[-1] == {"role": "user", "content": "say hi"}
    assert [t["function"]["name"] for t in first["request"]["tools"]] == ["shout"]
    assert first["response"]["tool_calls"][0]["name"] == "shout"
    assert second["request"]["messages"][-1]["role"] == "tool"  # the result it was shown
    assert second["response"]["content"].startswith("done:")
    assert second["status"] == "ok" and second["source"]["turn_id"] == ack.turn_id

    usage = api.get(f"{base}/usage").json()
    assert usage["calls"] == 2 and usage["failed_calls"] == 0
    prompt_tokens = first["usage"]["prompt_tokens"] + second["usage"]["prompt_tokens"]
    assert usage["prompt_tokens"] == prompt_tokens
    assert usage["cost"] == pytest.approx(prompt_tokens / 10) and usage["currency"] == "USD"
    assert api.get(f"/v1/conversations/{conv}/usage").json()["calls"] == 2
    links = api.get(f"{base}/links").json()["items"]
    assert [link["kind"] for link in links] == ["model"]

    trace = api.get(f"{base}/trace").json()
    root = trace["root"]
    assert root["name"].startswith("invoke_agent") and root["status"] == "ok"
    assert root["attributes"]["gen_ai.conversation.id"] == conv
    spans = names(root)
    assert spans.count("chat script") == 2
    tool = next(c for c in root["children"] if c["name"] == "execute_tool shout")
    assert [c["name"] for c in tool["children"]] == [f"run_task {shout.target_id}"]
    assert {first["span_id"], second["span_id"]} <= {c["span_id"] for c in root["children"]}

    # Access is the conversation's: another client, an unknown turn or conversation get 404.
    other = gateway(cluster, other_key)
    for path in ("calls", "trace", "usage", "links"):
        assert other.get(f"{base}/{path}").status_code == 404
        assert api.get(f"/v1/conversations/{conv}/turns/turn_nope/{path}").status_code == 404
    assert other.get(f"/v1/conversations/{conv}/usage").status_code == 404
    assert other.get("/v1/usage").json()["calls"] == 0
    assert api.get("/v1/usage", params={"agent_id": agent.id}).json()["calls"] == 2
    # ``since`` is a date-time with its zone, as the schema says: not seconds or a bare date.
    assert api.get("/v1/usage", params={"since": "2000-01-01T00:00:00Z"}).json()["calls"] == 2
    for loose in ("0", "2000-01-01", "2000-01-01T00:00:00"):
        refused = api.get("/v1/usage", params={"since": loose})
        assert refused.status_code == 422, (loose, refused.text)
        assert "RFC 3339" in refused.text


class Captured:
    """A call sink that keeps what it is handed (the test's own sink, beside the store's)."""

    def __init__(self) -> None:
        self.records: list[ModelCallRecord] = []

    def model_call(self, record: ModelCallRecord) -> None:
        self.records.append(record)


async def test_an_api_key_reaches_the_provider_but_never_the_record() -> None:
    secret = "sk-live-0123456789-do-not-record"

    async def key() -> str:
        return secret

    captured = Captured()
    recording.add_call_sink(captured)
    try:
        with Listening() as listener:
            egress = EgressPolicy.of([f"127.0.0.1:{listener.port}"], "TEST_HOSTS")
            model = OpenAIHttpModel(f"{listener.url}/v1", egress, api_key=key)
            request = ChatRequest(
                messages=[{"role": "user", "content": "hello"}],
                tools=[ToolSpec("lookup", "Look up", {"type": "object"})],
                tool_calling="native",
                temperature=0.3,
            )
            text = await complete(model, request)
    finally:
        recording.remove_call_sink(captured)
    assert text  # the listener answered
    assert listener.requests[-1].headers["authorization"] == f"Bearer {secret}"
    (record,) = captured.records
    assert record.request is not None
    assert record.request["messages"] == [{"role": "user", "content": "hello"}]
    assert record.request["temperature"] == 0.3
    assert record.request["tools"][0]["function"]["name"] == "lookup"
    assert record.response is not None and record.response.content == text
    assert record.provider == "openai" and record.status == "ok"
    dumped = record.model_dump_json()
    assert secret not in dumped and "authorization" not in dumped.lower()
    assert "Bearer" not in json.dumps(record.request)
