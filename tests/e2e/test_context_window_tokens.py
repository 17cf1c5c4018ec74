"""A recorded call's context window counted by the real local model's tokenizer, via the gateway.

Turns answered by vLLM (SmolLM2 on CPU) in both tool-calling modes: the native mode sends the tools
with the request (SmolLM2's chat template leaves them out of the prompt), the constrained mode
makes a chooser call with a JSON schema and, when it picks a tool, a call with a named tool choice.
For every call the turns recorded, the context window is counted by the deployment that served it,
and its parts add up to exactly the prompt tokens the engine reported for that call.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import LlmApp
from tests.e2e.test_local_model import calculator_tool, put

pytestmark = pytest.mark.e2e


def _agent(api: httpx.Client, tool_calling: str, tool_id: str) -> str:
    from tests.integration.test_gateway import unique

    profile_id, persona_id = unique("local"), unique("persona")
    profile = {"provider": "vllm", "model": "default", "tool_calling": tool_calling}
    put(api, f"/v1/model-profiles/{profile_id}", {**profile, "max_tokens": 24, "temperature": 0})
    persona = {
        "system_prompt": "You answer briefly.\n\nYou are polite.",
        "model_profile_id": profile_id,
        "tool_ids": [tool_id],
        "constraints": {"max_moves_per_turn": 1},
    }
    put(api, f"/v1/personas/{persona_id}", persona)
    agent = api.post("/v1/agents", json={"name": tool_calling, "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    return str(agent.json()["id"])


def _turn(api: httpx.Client, conv_id: str, content: str) -> str:
    posted = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = str(posted.json()["turn_id"])
    path = f"/v1/conversations/{conv_id}/turns/{turn_id}"
    turn = wait_for(lambda: (t := api.get(path).json())["status"] != "active" and t, 300, 0.5)
    assert turn["status"] == "completed", turn
    return turn_id


def _calls(api: httpx.Client, conv_id: str, turn_id: str) -> list[dict[str, Any]]:
    """The turn's recorded calls, once the background writer has written every one the turn's
    usage counts."""
    base = f"/v1/conversations/{conv_id}/turns/{turn_id}"
    expected = api.get(f"{base}/usage").json()["calls"]

    def written() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = api.get(f"{base}/calls").json()["items"]
        return items if items and len(items) >= expected else None

    found = wait_for(written, 60, 0.5)
    assert found is not None
    return found


def test_every_local_call_is_counted_exactly_by_its_deployment(
    llm_app: LlmApp, ray_cluster: Cluster, serve_port: int
) -> None:
    from tests.factories import make_client
    from tests.integration.test_gateway import deploy_gateway, http_client, unique

    url = deploy_gateway(ray_cluster, serve_port)
    key = make_client(ray_cluster.store, "tokens-e2e")[1]
    windows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with http_client(url, key) as api:
        task_id, tool_id = unique("task"), unique("tool")
        calculator_tool(api, task_id, tool_id)
        for mode, questions in (
            ("native", ("My name is Ada.", "What is my name?")),
            ("constrained", ("Use the calculator tool to compute 12 * 7.",)),
        ):
            agent_id = _agent(api, mode, tool_id)
            conv = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
            for question in questions:
                turn_id = _turn(api, conv, question)
                for call in _calls(api, conv, turn_id):
                    path = f"/v1/conversations/{conv}/turns/{turn_id}/calls/{call['id']}/context"
                    answer = api.get(path)
                    assert answer.status_code == 200, answer.text
                    windows.append((call, answer.json()))

    assert len(windows) >= 3
    assert any(call["request"].get("tools") for call, _ in windows)  # the native mode's
    assert any(call["request"].get("response_format") for call, _ in windows)  # the chooser's
    for call, window in windows:
        assert call["status"] == "ok" and call["provider"] == "vllm", call
        assert window["counted_by"] == "tokenizer", window
        assert window["tokenizer"] == llm_app.model and window["count_note"] is None
        by = {s["name"]: s["tokens"] for s in window["sections"]}
        # Exact: the parts add up to the prompt tokens the engine counted for this very call.
        assert sum(by.values()) == window["total_tokens"] == call["usage"]["prompt_tokens"]
        assert window["reported_prompt_tokens"] == call["usage"]["prompt_tokens"]
        assert by["system_prompt"] > 0 and by["history"] > 0
        assert all(tokens >= 0 for tokens in by.values()), by
        assert isinstance(window["window"], int) and window["window"] > window["total_tokens"]
    # The second native turn carries the first one's exchange: more history, same system prompt.
    first, second = [w for c, w in windows if c["request"].get("tools")][:2]
    assert _tokens(second, "history") > _tokens(first, "history")
    assert _tokens(second, "system_prompt") == _tokens(first, "system_prompt")


def _tokens(window: dict[str, Any], section: str) -> int:
    return int(next(s["tokens"] for s in window["sections"] if s["name"] == section))
