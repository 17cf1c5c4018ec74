"""The shipped memory library (tasks, tools, persona) and the memory/llm actions, run in-process
by ``run_task`` against a real SQLite store, LanceDB directory and the real embedding model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.actions.llm_action import ModelOutputInvalid, parse_json_reply, render_transcript
from actors.executor import run_task
from cluster.executor_wiring import executor_services
from core.context_contract import CONTEXT_CONTRACT
from core.domain import Agent, ModelProfile, Persona, ScriptStep, TaskDef, Tool
from core.ids import utc_now
from core.memory.context import assemble_context
from core.ports import TaskContext
from core.store import open_store

LIBRARY = Path(__file__).resolve().parents[2] / "library"
MINE = {
    "tasks": [
        "context_assembly",
        "memory_extraction",
        "memory_search",
        "memory_write",
        "memory_consolidation",
    ],
    "tools": ["search_memory", "write_memory"],
    "personas": ["memory_assistant"],
}


def load(kind: str, name: str) -> Any:
    data = yaml.safe_load((LIBRARY / kind / f"{name}.yaml").read_text())
    model = {"tasks": TaskDef, "tools": Tool, "personas": Persona}[kind]
    return model.model_validate(data)


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, ns in MINE.items() for n in ns])
def test_library_files_are_valid(kind: str, name: str) -> None:
    assert load(kind, name).id == name


def test_tools_target_shipped_tasks() -> None:
    for name in MINE["tools"]:
        tool = load("tools", name)
        assert tool.target_type == "task" and tool.target_id in MINE["tasks"]


def test_assemble_context_renders_sections_and_skips_empty_ones() -> None:
    text = assemble_context(
        [{"type": "fact", "content": "The user is called Ada."}, {"type": "note", "content": ""}],
        pending=[{"tool": "build_report", "status": "running"}],
        tools=[{"name": "search_memory", "description": "Search memory"}],
    )
    assert "- [fact] The user is called Ada." in text
    assert "- build_report: running" in text
    assert "- search_memory: Search memory" in text
    assert assemble_context([]) == ""


def test_parse_json_reply() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert parse_json_reply('Sure! {"n": 3} done', schema) == {"n": 3}
    for bad in ("no json", '{"n": "x"}', '{"n": '):
        with pytest.raises(ModelOutputInvalid):
            parse_json_reply(bad, schema)


SYSTEM = {"role": "system", "content": "You help."}


def test_render_transcript_keeps_roles() -> None:
    text = render_transcript(
        [{"role": "user", "content": "hi"}, {"role": "agent", "content": "yo"}]
    )
    assert text == "user: hi\nagent: yo"


def test_render_transcript_shows_tool_calls_with_their_outcome() -> None:
    text = render_transcript(
        [
            {
                "role": "tool_call",
                "name": "calc",
                "arguments": {"x": 1},
                "success": True,
                "result": {"y": 2},
            },
            {
                "role": "tool_call",
                "name": "web",
                "arguments": {},
                "success": False,
                "error": {"code": "TIMEOUT"},
            },
        ]
    )
    assert text == (
        'tool_call calc({"x": 1}) -> {"y": 2}\ntool_call web({}) -> failed: {"code": "TIMEOUT"}'
    )


# --------------------------------------------------------------------------- tasks, in-process


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("WONDER_EMBEDDER", "local")
    settings_env = {"WONDER_DATA_DIR": str(tmp_path)}
    store = open_store(settings_env)
    now = utc_now()
    extracted = {
        "memories": [
            {
                "type": "fact",
                "subject": "user.city",
                "content": "The user lives in Lisbon.",
                "significance": 0.9,
            },
            {
                "type": "episode",
                "content": "The user talked about moving house.",
                "significance": 0.5,
            },
        ]
    }
    corrected = {
        "memories": [
            {
                "type": "fact",
                "subject": "user.city",
                "content": "The user lives in Porto.",
                "significance": 0.9,
            },
        ]
    }
    for profile_id, reply in (("extractor", extracted), ("corrector", corrected)):
        store.model_profiles.put(
            ModelProfile(
                id=profile_id, provider="scripted", script=[ScriptStep(reply=json.dumps(reply))]
            ),
            now,
        )
    store.personas.put(Persona(id="p", system_prompt="hi", model_profile_id="extractor"), now)
    store.agents.insert(
        Agent(
            id="agent-1",
            client_id="client-1",
            name="a",
            persona=Persona(id="p", system_prompt="hi", model_profile_id="extractor"),
            created_at=now,
        )
    )
    yield settings_env


def run(task: TaskDef, task_input: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Run a task in this process with the services an executor worker would have."""
    context = TaskContext(
        client_id="client-1",
        conversation_id="c1",
        agent_id="agent-1",
        turn_id="t1",
        settings_env=env,
    )
    outcome = asyncio.run(run_task(task, task_input, context, executor_services(env)))
    return outcome.model_dump(mode="json", exclude_none=True)


def test_extraction_then_context_assembly_recalls_and_corrections_update(
    env: dict[str, str],
) -> None:
    extraction = load("tasks", "memory_extraction")
    transcript = [{"role": "user", "content": "I just moved to Lisbon!"}]
    first = run(extraction, {"agent_id": "agent-1", "transcript": transcript}, env)
    assert first["success"], first
    assert first["result"]["created"] == 2

    assembly = load("tasks", "context_assembly")
    hook_input = {
        "agent_id": "agent-1",
        "query": "Where do I live?",
        "pending": [],
        "tools": [{"name": "search_memory", "description": "Search memory"}],
        "request": {"messages": [SYSTEM, {"role": "user", "content": "Where do I live?"}]},
    }
    context = run(assembly, hook_input, env)
    assert context["success"], context
    assert context["result"]["contract"] == CONTEXT_CONTRACT
    messages = context["result"]["request"]["messages"]
    assert messages[0]["content"].startswith("You help.\n\n") and messages[1:] == [
        {"role": "user", "content": "Where do I live?"}
    ]
    assert "The user lives in Lisbon." in messages[0]["content"]

    # A newer contradicting fact on the same subject updates the old one.
    llm_step = extraction.actions[0].model_copy(
        update={"params": {**extraction.actions[0].params, "model_profile": "corrector"}}
    )
    correction = extraction.model_copy(update={"actions": [llm_step, *extraction.actions[1:]]})
    second = run(correction, {"agent_id": "agent-1", "transcript": transcript}, env)
    assert second["result"]["updated"] == 1 and second["result"]["created"] == 0
    text = run(assembly, hook_input, env)["result"]["request"]["messages"][0]["content"]
    assert "Porto" in text and "Lisbon." not in text

    search = run(load("tasks", "memory_search"), {"query": "city", "types": ["fact"]}, env)
    facts = search["result"]["memories"]
    assert [m["content"] for m in facts] == ["The user lives in Porto."]
    assert facts[0]["metadata"]["source"] == {"conversation_id": "c1", "turn_id": "t1"}


def test_write_read_delete_tasks_and_permission(env: dict[str, str]) -> None:
    written = run(load("tasks", "memory_write"), {"content": "Remember the milk"}, env)
    memory_id = written["result"]["written"][0]["id"]
    read = TaskDef(id="r", actions=[{"kind": "memory.read", "params": {"id": memory_id}}])
    assert run(read, {}, env)["result"]["content"] == "Remember the milk"
    other = TaskDef(
        id="o",
        actions=[{"kind": "memory.read", "params": {"id": memory_id, "agent_id": "agent-2"}}],
    )
    assert run(other, {}, env)["error"]["code"] == "PERMISSION_DENIED"
    delete = TaskDef(id="d", actions=[{"kind": "memory.delete", "params": {"id": memory_id}}])
    assert run(delete, {}, env)["result"] == {"deleted": memory_id}
    assert run(read, {}, env)["error"]["code"] == "NOT_FOUND"


def test_empty_query_finds_nothing_instead_of_failing_the_turn(env: dict[str, str]) -> None:
    request = {"messages": [SYSTEM, {"role": "user", "content": ""}]}
    hook_input = {"query": "", "pending": [], "tools": [], "request": request}
    out = run(load("tasks", "context_assembly"), hook_input, env)
    assert out == {"success": True, "result": {"contract": CONTEXT_CONTRACT, "request": request}}
