"""LoRA for real: an adapter of the bundled model (written at session start, tests/e2e/lora.py)
served by the primary deployment through ``WONDER_LLM_LORA_MODULES`` (tests/e2e/conftest.py).

The adapter's A and B are random and non-zero, so with greedy decoding the same prompt answers
differently through it than through the base model: that difference (and vLLM naming the adapter
as the answering model) is how these tests see the adapter applied.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from core.domain import ModelProfile
from core.ids import utc_now
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import LlmApp

pytestmark = pytest.mark.e2e

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def complete(app: LlmApp, model: str, messages: list[dict[str, str]]) -> httpx.Response:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": 12,
        "temperature": 0.0,
        "logprobs": True,
    }
    return httpx.post(f"{app.base_url}/chat/completions", json=body, timeout=300, trust_env=False)


def answer(response: httpx.Response) -> tuple[str, list[float]]:
    """The greedy answer and the log-probability of each of its tokens."""
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    return choice["message"]["content"], [t["logprob"] for t in choice["logprobs"]["content"]]


def test_models_lists_the_adapter_on_its_base_model(llm_app: LlmApp) -> None:
    listed = httpx.get(f"{llm_app.base_url}/models", timeout=30, trust_env=False).json()
    by_id = {m["id"]: m for m in listed["data"]}
    assert llm_app.lora_adapter in by_id, sorted(by_id)
    assert by_id[llm_app.lora_adapter]["parent"] == llm_app.model


def test_the_adapter_changes_the_greedy_answer_and_only_its_own(llm_app: LlmApp) -> None:
    base = answer(complete(llm_app, "default", QUESTION))
    through = complete(llm_app, llm_app.lora_adapter, QUESTION)
    adapted = answer(through)
    assert through.json()["model"] == llm_app.lora_adapter
    assert adapted[0] != base[0], (adapted[0], base[0])
    assert adapted[1][0] != base[1][0]  # the first token's distribution already differs
    # The adapter is applied per request: the base model answers as before, and so does it.
    assert answer(complete(llm_app, "default", QUESTION))[0] == base[0]
    assert answer(complete(llm_app, llm_app.lora_adapter, QUESTION))[0] == adapted[0]


def test_an_unknown_adapter_is_a_clear_404(llm_app: LlmApp) -> None:
    response = complete(llm_app, "no-such-adapter", QUESTION)
    assert response.status_code == 404, response.text
    assert "no-such-adapter" in response.json()["error"]["message"]


# --------------------------------------------------------------------------- through a profile


def put_profile(api: httpx.Client, model: str) -> httpx.Response:
    from tests.integration.test_gateway import unique

    profile = {"provider": "vllm", "model": model, "max_tokens": 12, "temperature": 0}
    return api.put(f"/v1/model-profiles/{unique('lora')}", json=profile)


def converse(api: httpx.Client, profile_id: str) -> dict[str, Any]:
    """A persona with profile ``profile_id``, a conversation, one question: its ended turn and
    the agent's reply."""
    from tests.integration.test_gateway import unique

    persona_id = unique("persona")
    persona = {"system_prompt": "You answer briefly.", "model_profile_id": profile_id}
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200
    agent = api.post("/v1/agents", json={"name": "lora", "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    created = api.post("/v1/conversations", json={"agent_id": agent.json()["id"]})
    assert created.status_code == 201, created.text
    conversation = created.json()["id"]
    posted = api.post(
        f"/v1/conversations/{conversation}/messages", json={"content": QUESTION[0]["content"]}
    )
    assert posted.status_code == 202, posted.text
    path = f"/v1/conversations/{conversation}/turns/{posted.json()['turn_id']}"

    def ended() -> dict[str, Any] | None:
        turn: dict[str, Any] = api.get(path).json()
        return turn if turn["status"] != "active" else None

    turn = wait_for(ended, timeout=300, interval=0.5)
    messages = api.get(f"/v1/conversations/{conversation}/messages").json()["items"]
    replies = [m["content"] for m in messages if m["role"] == "agent"]
    return {"turn": turn, "reply": replies[-1] if replies else None}


def served_profile(api: httpx.Client, model: str) -> str:
    stored = put_profile(api, model)
    assert stored.status_code == 200, stored.text
    return str(stored.json()["id"])


def test_a_profile_naming_the_adapter_answers_through_it(
    llm_app: LlmApp, ray_cluster: Cluster, serve_port: int
) -> None:
    from tests.factories import make_client
    from tests.integration.test_gateway import deploy_gateway, http_client, unique

    url = deploy_gateway(ray_cluster, serve_port)
    client_id, key = make_client(ray_cluster.store, "lora-e2e")
    with http_client(url, key) as api:
        adapted = converse(api, served_profile(api, llm_app.lora_adapter))
        base = converse(api, served_profile(api, "default"))
        # A profile naming an adapter nobody serves is refused when it is stored, naming it and
        # what the deployment does serve (the gateway asks the deployment).
        refused = put_profile(api, "no-such-adapter")
        # One stored before its adapter was withdrawn (written to the store here, as the PUT
        # would have when the adapter was served) fails its turn instead.
        withdrawn = ModelProfile(id=unique("lora"), model="no-such-adapter", max_tokens=12)
        ray_cluster.store.model_profiles.put(withdrawn, utc_now(), owner=client_id)
        unknown = converse(api, withdrawn.id)
    for outcome in (adapted, base):
        assert outcome["turn"]["status"] == "completed", outcome
        assert outcome["turn"]["usage"]["completion_tokens"] > 0
    # Same persona prompt, same question, greedy: only the adapter can make the answers differ.
    assert adapted["reply"] != base["reply"], (adapted, base)
    assert adapted["turn"]["usage"]["prompt_tokens"] == base["turn"]["usage"]["prompt_tokens"]
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "'no-such-adapter'" in message and llm_app.lora_adapter in message, message
    assert llm_app.second_model in message, message  # every deployment's names
    failed = unknown["turn"]
    assert failed["status"] == "failed" and failed["failure_code"] == "INVALID_INPUT", failed
    assert "no-such-adapter" in failed["failure_reason"]
