"""A ``vllm`` model profile names a model the local deployment serves: checked at ``PUT``.

The pure check (``core.library_policy.unserved_model``) and the gateway's ``PUT`` over a fake
``ServedModels`` port; the Ray adapter, against the real vLLM deployment, is in
``tests/e2e/test_llm_lora.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.domain import ModelProfile
from core.library_policy import unserved_model
from core.store import Store
from serving.gateway.app import create_api
from tests.unit.test_gateway_api import RecordingConversations, add_client, error_of, unit_context

SERVED = frozenset({"SmolLM2-135M-Instruct", "default", "smol-lora"})


@dataclass
class ListedModels:
    """``ServedModels`` answering ``listed``, counting how often it is asked."""

    listed: frozenset[str] | None
    asked: list[int] = field(default_factory=list)

    def names(self) -> frozenset[str] | None:
        self.asked.append(1)
        return self.listed


def test_a_served_model_or_adapter_passes() -> None:
    for model in ("SmolLM2-135M-Instruct", "smol-lora", "default"):
        assert unserved_model(ModelProfile(id="p", model=model), lambda: SERVED) is None


def test_an_unserved_name_is_refused_naming_what_is_served() -> None:
    problem = unserved_model(ModelProfile(id="p", model="no-such-adapter"), lambda: SERVED)
    assert problem is not None
    assert "'no-such-adapter'" in problem and "smol-lora" in problem and "default" in problem


def test_nothing_is_asked_for_the_default_name_or_another_provider() -> None:
    never = ListedModels(SERVED)
    assert unserved_model(ModelProfile(id="p"), never.names) is None
    openai = ModelProfile(id="p", provider="openai", model="gpt-x", base_url="http://x")
    assert unserved_model(openai, never.names) is None
    assert never.asked == []


def test_an_unknown_listing_checks_nothing() -> None:
    assert unserved_model(ModelProfile(id="p", model="anything"), lambda: None) is None


@pytest.fixture
def served() -> ListedModels:
    return ListedModels(SERVED)


@pytest.fixture
def api(tmp_path: Path, served: ListedModels) -> Iterator[TestClient]:
    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    context = replace(unit_context(store, RecordingConversations()), models=served)
    with TestClient(create_api(context), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {add_client(store, 'alice')}"
        yield client


def test_put_refuses_an_unserved_model_with_a_400(api: TestClient) -> None:
    response = api.put("/v1/model-profiles/p", json={"provider": "vllm", "model": "nope"})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["code"] == "INVALID_INPUT" and not error["retriable"]
    assert "'nope'" in error["message"] and "smol-lora" in error["message"]
    assert api.get("/v1/model-profiles/p").status_code == 404  # nothing stored


def test_put_stores_a_served_adapter(api: TestClient) -> None:
    response = api.put("/v1/model-profiles/p", json={"provider": "vllm", "model": "smol-lora"})
    assert response.status_code == 200, response.text
    assert api.get("/v1/model-profiles/p").json()["model"] == "smol-lora"


def test_put_stores_unchecked_when_nothing_says(api: TestClient, served: ListedModels) -> None:
    served.listed = None  # no local model deployed, or it did not answer
    response = api.put("/v1/model-profiles/p", json={"provider": "vllm", "model": "later"})
    assert response.status_code == 200, response.text
    assert served.asked == [1]
