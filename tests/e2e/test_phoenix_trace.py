"""A turn's trace in a real Arize Phoenix (docs/observability.md, "Phoenix").

The session's Phoenix (``tests/phoenix.py``, on 127.0.0.1) is up before the session's Ray, whose
every process exports its spans there over OTLP/HTTP (the standard ``OTEL_EXPORTER_OTLP_*``
variables, ``ray_cluster``). A turn calls a task tool (an executor worker) and a workflow tool (a
workflow coordinator) whose agent node asks an agent on the real local model (vLLM on CPU, its
own replica process); a second turn delegates to that agent. Everything is read back through
Phoenix's own REST API (``GET /v1/projects/{project}/spans``): one trace per turn, each span under
the right parent, the model call's server span from the replica, the ``gen_ai.*`` attributes set.
Phoenix runs behind a guard that refuses any connection outside loopback: none was tried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from core.domain import ModelProfile, Tool, ToolRetry, TurnStatus
from core.ids import new_id, utc_now
from core.store import Store
from core.tracing import turn_span_id, turn_trace_id
from core.workflows import WorkflowDef
from tests.conftest import Cluster, async_wait_for
from tests.e2e.conftest import LlmApp
from tests.factories import make_agent, make_client, make_conversation, scripted_profile, task_tool
from tests.integration.access import post
from tests.phoenix import PhoenixServer

PROJECT = "default"  # spans without an ``openinference.project.name`` resource land here
TURN_TIMEOUT_S = 600.0  # the model's replica decodes on two loaded cores
EXPORT_TIMEOUT_S = 180.0  # a batch leaves each process within a second; Phoenix then ingests it
SLOW_MODEL = ToolRetry(timeout_ms=int(TURN_TIMEOUT_S * 1000))
"""The tools that wait for the local model: one attempt, as long as a turn may take."""


@dataclass(frozen=True)
class PhoenixSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    status: str
    attributes: dict[str, Any]

    @property
    def process(self) -> Any:
        return self.attributes.get("wonder.process")


def _flat(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Phoenix returns dotted attribute names as nested objects: flattened back."""
    flat: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def phoenix_spans(server: PhoenixServer, trace_id: str) -> list[PhoenixSpan]:
    """Every span Phoenix holds of ``trace_id`` (its REST API, paged)."""
    spans: list[PhoenixSpan] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"trace_id": trace_id, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        response = httpx.get(
            f"{server.url}/v1/projects/{PROJECT}/spans",
            params=params,
            timeout=30.0,
            trust_env=False,
        )
        if response.status_code == 404:  # no span has reached the project yet
            return []
        response.raise_for_status()
        body = response.json()
        for item in body["data"]:
            spans.append(
                PhoenixSpan(
                    name=item["name"],
                    trace_id=item["context"]["trace_id"],
                    span_id=item["context"]["span_id"],
                    parent_id=item.get("parent_id"),
                    kind=item["span_kind"],
                    status=item["status_code"],
                    attributes=_flat(item.get("attributes") or {}),
                )
            )
        cursor = body.get("next_cursor")
        if not cursor:
            return spans


def children(spans: list[PhoenixSpan], parent: PhoenixSpan) -> list[PhoenixSpan]:
    return [s for s in spans if s.parent_id == parent.span_id]


def one(spans: list[PhoenixSpan], name_prefix: str, parent: PhoenixSpan) -> PhoenixSpan:
    matches = [s for s in children(spans, parent) if s.name.startswith(name_prefix)]
    assert len(matches) == 1, (name_prefix, parent.name, [s.name for s in spans])
    return matches[0]


def assert_one_tree(spans: list[PhoenixSpan], trace_id: str, root_id: str) -> PhoenixSpan:
    """One trace: every span in it, one root (the turn's span), every other parent present."""
    assert {s.trace_id for s in spans} == {trace_id}
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)  # each span exported once
    roots = [s for s in spans if s.parent_id is None]
    assert [r.span_id for r in roots] == [root_id], [(s.name, s.parent_id) for s in spans]
    assert all(s.parent_id in by_id for s in spans if s.parent_id is not None)
    return by_id[root_id]


def assert_model_calls(spans: list[PhoenixSpan], agent_turn: PhoenixSpan, model: str) -> None:
    """The agent's model calls: each the caller's ``chat`` span, the replica's server span under
    it (the local model may be called more than once in a turn)."""
    chats = [s for s in children(spans, agent_turn) if s.name.startswith("chat ")]
    assert chats, [s.name for s in spans]
    conversation_id = agent_turn.attributes["gen_ai.conversation.id"]
    for chat in chats:
        assert chat.process == "conversation", chat
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.conversation.id"] == conversation_id
        (served,) = children(spans, chat)
        assert served.name == f"chat {served.attributes['gen_ai.request.model']}"
        assert served.process == "llm"  # the model replica's own process exported it
        assert served.attributes["gen_ai.provider.name"] == "vllm"
        assert served.attributes["wonder.deployment"] and served.attributes["wonder.replica"]
        assert served.attributes["gen_ai.request.model"] in (model, "default")
        assert served.attributes["gen_ai.usage.input_tokens"] > 0
        assert served.attributes["gen_ai.usage.output_tokens"] > 0
        assert served.attributes["gen_ai.response.time_to_first_chunk"] > 0


async def trace_in_phoenix(
    server: PhoenixServer, turn_id: str, expected: list[str]
) -> tuple[str, list[PhoenixSpan]]:
    """The turn's trace as Phoenix holds it, once a span of each ``expected`` name (a prefix) and
    the replica's have arrived."""
    trace_id = turn_trace_id(turn_id)
    seen: list[PhoenixSpan] = []

    def arrived() -> bool:
        seen[:] = phoenix_spans(server, trace_id)
        names = [s.name for s in seen]
        replica = any(s.process == "llm" for s in seen)
        return replica and all(any(n.startswith(e) for n in names) for e in expected)

    try:
        await async_wait_for(arrived, timeout=EXPORT_TIMEOUT_S, interval=1.0)
    except AssertionError:
        found = [(s.name, s.process, s.parent_id) for s in seen]
        raise AssertionError(f"trace {trace_id} in Phoenix holds only {found}") from None
    await asyncio.sleep(2.0)  # the last batches of every process (each sends within 0.5 s)
    return trace_id, phoenix_spans(server, trace_id)


@dataclass(frozen=True)
class Library:
    store: Store
    client_id: str
    writer_id: str  # an agent on the real local model
    tools: dict[str, Tool]


@pytest.fixture(scope="module")
def library(ray_cluster: Cluster, llm_app: LlmApp) -> Iterator[Library]:
    store = ray_cluster.store
    client_id, _ = make_client(store)
    local = store.model_profiles.put(
        ModelProfile(
            id=f"local-{new_id().lower()}", provider="vllm", model=llm_app.model, max_tokens=8
        ),
        utc_now(),
    )
    writer = make_agent(store, client_id, local, system_prompt="Answer in one short sentence.")
    pid = task_tool(
        store, "pid", [{"kind": "python", "params": {"callable": "tests.callables:worker_pid"}}]
    )
    workflow = store.workflows.put(
        WorkflowDef.model_validate(
            {
                "id": f"wf-{new_id().lower()}",
                "nodes": [{"id": "write", "kind": "agent", "target_id": writer.id}],
            }
        ),
        utc_now(),
    )
    summarize = store.tools.put(
        Tool(
            id=f"tool-summarize-{new_id().lower()}",
            name="summarize",
            description="run the summary workflow",
            input_schema={"type": "object"},
            target_type="workflow",
            target_id=workflow.id,
            retry=SLOW_MODEL,
        ),
        utc_now(),
    )
    ask = store.tools.put(
        Tool(
            id=f"tool-ask-{new_id().lower()}",
            name="ask_writer",
            description="ask the writer",
            input_schema={"type": "object", "properties": {"input": {"type": "string"}}},
            target_type="agent",
            target_id=writer.id,
            invocation_mode="delegate",
            retry=SLOW_MODEL,
        ),
        utc_now(),
    )
    yield Library(
        store, client_id, writer.id, {"pid": pid, "summarize": summarize, "ask_writer": ask}
    )


async def run_turn(library: Library, script: list[dict[str, Any]], tools: list[str]) -> str:
    """A turn of a scripted agent (it picks the tools) with ``tools``; its id once completed."""
    store = library.store
    agent = make_agent(
        store,
        library.client_id,
        scripted_profile(store, script),
        [library.tools[name] for name in tools],
    )
    conversation = make_conversation(store, library.client_id, agent)
    ack = await post(conversation.id, "What happened?", "u")
    turn = await async_wait_for(
        lambda: store.turns.get(ack.turn_id).status in (TurnStatus.COMPLETED, TurnStatus.FAILED),
        timeout=TURN_TIMEOUT_S,
        interval=0.5,
    )
    assert turn and store.turns.get(ack.turn_id).status is TurnStatus.COMPLETED
    return ack.turn_id


async def test_a_turns_trace_reaches_phoenix_with_tool_workflow_and_replica_spans(
    phoenix: PhoenixServer, library: Library, llm_app: LlmApp
) -> None:
    script = [
        {"tool_calls": [{"name": "pid", "arguments": {}}, {"name": "summarize", "arguments": {}}]},
        {"reply": "done"},
    ]
    turn_id = await run_turn(library, script, ["pid", "summarize"])

    expected = ["invoke_agent", "execute_tool pid", "run_task", "execute_tool summarize"]
    expected += ["invoke_workflow", "workflow_node write", "chat "]
    trace_id, spans = await trace_in_phoenix(phoenix, turn_id, expected)
    root = assert_one_tree(spans, trace_id, turn_span_id(turn_id))
    assert root.name.startswith("invoke_agent") and root.process == "conversation"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    conversation_id = root.attributes["gen_ai.conversation.id"]
    assert conversation_id and root.attributes["gen_ai.agent.id"]

    tool = one(spans, "execute_tool pid", root)
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "pid"
    task = one(spans, "run_task", tool)
    assert task.process == "executor"

    call = one(spans, "execute_tool summarize", root)
    run = one(spans, "invoke_workflow", call)
    assert {tool.status, call.status, run.status}.isdisjoint({"ERROR"}), (tool, call, run)
    assert run.process == "workflow"
    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run.attributes["gen_ai.conversation.id"] == conversation_id
    node = one(spans, "workflow_node write", run)
    writer_turn = one(spans, "invoke_agent", node)
    assert writer_turn.attributes["gen_ai.agent.id"] == library.writer_id
    assert writer_turn.attributes["gen_ai.conversation.id"] != conversation_id
    assert_model_calls(spans, writer_turn, llm_app.model)
    assert phoenix.refused() == []  # Phoenix tried no connection outside loopback


async def test_a_delegated_childs_spans_join_the_parent_turns_trace_in_phoenix(
    phoenix: PhoenixServer, library: Library, llm_app: LlmApp
) -> None:
    script = [
        {"tool_calls": [{"name": "ask_writer", "arguments": {"input": "Say hello."}}]},
        {"reply": "done"},
    ]
    turn_id = await run_turn(library, script, ["ask_writer"])

    expected = ["invoke_agent", "execute_tool ask_writer", "chat "]
    trace_id, spans = await trace_in_phoenix(phoenix, turn_id, expected)
    root = assert_one_tree(spans, trace_id, turn_span_id(turn_id))
    call = one(spans, "execute_tool ask_writer", root)
    assert call.status != "ERROR", call
    child = one(spans, "invoke_agent", call)  # the child conversation's turn, in this trace
    assert child.process == "conversation" and child.trace_id == root.trace_id
    assert child.attributes["gen_ai.agent.id"] == library.writer_id
    assert child.attributes["gen_ai.conversation.id"] != root.attributes["gen_ai.conversation.id"]
    assert_model_calls(spans, child, llm_app.model)
    assert phoenix.refused() == []
