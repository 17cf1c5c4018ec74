"""End-to-end fixtures: the real local model (vLLM on CPU) on the session's Ray Serve.

``llm_app`` deploys the LLM application once per test session (≈ 35 to 70 s on CPU; the first run on
a machine also converts the model, ≈ 25 s, cached in ~/.cache/wonder/models) and leaves it up, so
every e2e test shares one engine. Keep this file additive: other e2e modules use it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import Cluster


@dataclass(frozen=True)
class LlmApp:
    base_url: str  # OpenAI-compatible base URL, e.g. http://127.0.0.1:PORT/llm/v1
    model: str  # the name it is served as (it also answers to "default")
    ready_s: float  # how long the deployment took to become ready


@pytest.fixture(scope="session")
def llm_app(ray_cluster: Cluster, serve_port: int) -> Iterator[LlmApp]:
    from ray import serve

    from serving.llm import LLM_APP_NAME, LLM_ROUTE_PREFIX, build_llm_app, engine_spec
    from serving.model_setup import ensure_local_model

    settings = ray_cluster.settings
    ensure_local_model(progress=True, settings=settings)  # conversion progress shown here
    started = time.monotonic()
    # No model_dir: the replica prepares the model on its own node, as on a cluster (a cache hit).
    serve.run(build_llm_app(settings), name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
    ready_s = time.monotonic() - started
    print(f"\nLLM deployment ready in {ready_s:.1f} s")
    try:
        yield LlmApp(
            base_url=f"http://127.0.0.1:{serve_port}{LLM_ROUTE_PREFIX}/v1",
            model=engine_spec(settings).served_names[0],
            ready_s=ready_s,
        )
    finally:
        serve.delete(LLM_APP_NAME)  # stops the engine (and its EngineCore process) before Serve
