"""A fork answered by the real local model: its request carries the inherited history.

The source conversation asks A, B, C; a fork at B's turn asks C again. The fork's request must be
the same prompt the source's third turn sent (system + A, answer, B, answer, C): the engine counts
exactly as many prompt tokens, and more than a fresh conversation asking C alone.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import LlmApp

pytestmark = pytest.mark.e2e


def _turn(api: httpx.Client, conv_id: str, content: str) -> dict[str, Any]:
    posted = api.post(f"/v1/conversations/{conv_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    path = f"/v1/conversations/{conv_id}/turns/{posted.json()['turn_id']}"

    def ended() -> dict[str, Any] | None:
        turn: dict[str, Any] = api.get(path).json()
        return turn if turn["status"] != "active" else None

    turn = wait_for(ended, timeout=300, interval=0.5)
    assert turn is not None and turn["status"] == "completed", turn
    return turn


def test_fork_request_carries_the_inherited_history(
    llm_app: LlmApp, ray_cluster: Cluster, serve_port: int
) -> None:
    from tests.factories import make_client
    from tests.integration.test_gateway import deploy_gateway, http_client, unique

    url = deploy_gateway(ray_cluster, serve_port)
    key = make_client(ray_cluster.store, "fork-e2e")[1]
    with http_client(url, key) as api:
        profile_id, persona_id = unique("local"), unique("persona")
        profile = {"provider": "vllm", "model": "default", "max_tokens": 12, "temperature": 0}
        assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
        persona = {"system_prompt": "You answer briefly.", "model_profile_id": profile_id}
        assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
        agent = api.post("/v1/agents", json={"name": "fork", "persona_ref": {"id": persona_id}})
        assert agent.status_code == 201, agent.text
        agent_id = agent.json()["id"]

        source = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
        questions = ("My name is Ada.", "I live in Paris.", "What is my name?")
        _first, second, third = (_turn(api, source, q) for q in questions)

        made = api.post(f"/v1/conversations/{source}/forks", json={"turn_id": second["id"]})
        assert made.status_code == 201, made.text
        forked = _turn(api, made.json()["id"], questions[2])

        fresh = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
        alone = _turn(api, fresh, questions[2])

    assert forked["parent_turn_id"] == second["id"]
    assert forked["usage"]["prompt_tokens"] == third["usage"]["prompt_tokens"]
    assert forked["usage"]["prompt_tokens"] > alone["usage"]["prompt_tokens"]
