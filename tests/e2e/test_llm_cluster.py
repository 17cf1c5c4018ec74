"""The model at cluster scale, for real on CPU: two replicas with conversation affinity, and two
model profiles served side by side from two deployments.

Each test deploys its own LLM application (its own name and route, beside the session's ``llm``
app) and deletes it at the end: vLLM replicas take ≈ 4 GB each. Autoscaling 1 → 2 → 1 under a
burst is measured in ``benchmarks/llm_streaming.py`` (``--case autoscale``), not here: a second
replica takes 30-50 s to start on two cores, too long for the CI budget.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.llm.protocol import ChatRequest, ModelFinished, TextDelta
from core.settings import LlmModelSettings, Settings
from serving.llm_client import VllmHandleModel, conversation_key
from serving.llm_config import PRIMARY_DEPLOYMENT_NAME, deployment_name_for
from serving.llm_routing import last_route
from tests.conftest import Cluster

pytestmark = pytest.mark.e2e

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 40}  # a long shared prefix


def deploy(ray_cluster: Cluster, app: str, **overrides: Any) -> Iterator[str]:
    from ray import serve

    from serving.llm import build_llm_app
    from serving.model_setup import ensure_local_model

    settings = Settings(**{**ray_cluster.settings.model_dump(), **overrides})
    ensure_local_model(progress=True, settings=settings)
    started = time.monotonic()
    serve.run(build_llm_app(settings), name=app, route_prefix=f"/{app}")
    print(f"\n{app} ready in {time.monotonic() - started:.1f} s")
    try:
        yield app
    finally:
        serve.delete(app)  # stops the engines before the next test starts its own


@pytest.fixture
def two_replicas(ray_cluster: Cluster, serve_port: int) -> Iterator[str]:
    yield from deploy(ray_cluster, "llm-two", llm_num_replicas=2)


async def turn(model: VllmHandleModel, messages: list[dict[str, Any]]) -> str:
    request = ChatRequest(messages=messages, max_tokens=12, tool_calling="native")
    chunks = [chunk async for chunk in model.stream(request)]
    assert isinstance(chunks[-1], ModelFinished)
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_a_conversations_turns_land_on_one_replica(two_replicas: str) -> None:
    from ray import serve

    model = VllmHandleModel(app_name=two_replicas)
    routes: dict[str, list[str | None]] = {}
    for name in ("ada", "bob", "cy", "dee"):
        messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"I am {name}."}]
        key = conversation_key({"model": "default", "messages": messages})
        assert key is not None
        for n in range(3):
            reply = await turn(model, messages)
            routes.setdefault(key, []).append(last_route(key))
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"{n}?"},
            ]
    for key, replicas in routes.items():
        assert replicas[0] is not None and replicas == [replicas[0]] * 3, routes
        # The replica the router recorded is the one that answered, and its prefix cache hit.
        handle = serve.get_deployment_handle(PRIMARY_DEPLOYMENT_NAME, app_name=two_replicas)
        stats = await handle.options(session_id=key).engine_stats.remote()
        assert stats["replica"] == replicas[0]
        assert stats["prefix_cache_hits"] > 0 and stats["generation_tokens"] > 0


@pytest.fixture
def two_models(
    ray_cluster: Cluster, serve_port: int, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, int]]:
    from serving.model_setup import ensure_local_model

    # The same weights under another name: a second model profile, its own deployment.
    second = LlmModelSettings(name="smol-b", model_dir=str(ensure_local_model(progress=False)))
    # What an actor's runtime environment carries (Settings.env()): which deployment serves what.
    monkeypatch.setenv("WONDER_LLM_MODELS", json.dumps([second.model_dump()]))
    yield from ((app, serve_port) for app in deploy(ray_cluster, "llm-multi", llm_models=[second]))


async def test_two_model_profiles_answer_from_two_deployments(two_models: tuple[str, int]) -> None:
    from ray import serve

    app, port = two_models
    base = f"http://127.0.0.1:{port}/{app}/v1"
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        listed = (await client.get(f"{base}/models")).json()
    assert {"smol-b", "default"} <= {m["id"] for m in listed["data"]}

    async def generated(deployment: str) -> int:
        handle = serve.get_deployment_handle(deployment, app_name=app)
        stats: dict[str, Any] = await handle.engine_stats.remote()
        return int(stats["generation_tokens"])

    primary, second = PRIMARY_DEPLOYMENT_NAME, deployment_name_for("smol-b")
    before = await generated(primary), await generated(second)
    question = [{"role": "user", "content": "Name a colour."}]
    assert await turn(VllmHandleModel(model="smol-b", app_name=app), question)  # handle, direct
    after_handle = await generated(primary), await generated(second)
    assert after_handle[0] == before[0] and after_handle[1] > before[1]

    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        body = {"model": "smol-b", "messages": question, "max_tokens": 8}
        answer = await client.post(f"{base}/chat/completions", json=body)
        assert answer.status_code == 200, answer.text  # HTTP, forwarded by the primary
        assert answer.json()["model"] == "smol-b" and await generated(second) > after_handle[1]
        body["model"] = "default"
        assert (await client.post(f"{base}/chat/completions", json=body)).is_success
    assert await generated(primary) > before[0]
