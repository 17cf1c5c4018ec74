"""End-to-end fixtures: the real local model (vLLM on CPU) on the session's Ray Serve.

``llm_app`` deploys the LLM application once per test session and leaves it up, so every e2e
module shares its engines (each vLLM start costs 35 s to minutes of the two cores; the first run on
a machine also converts the model, ≈ 25 s, cached in ~/.cache/wonder/models). It is the
application ``wonder up`` deploys, from settings, with what the cluster-scale tests need beside
the primary model:

* the primary deployment (``LLMServer``, the bundled model, answering to its name and
  ``default``) also serves a LoRA adapter written at session start (``tests/e2e/lora.py``)
  through ``WONDER_LLM_LORA_MODULES``;
* a second model profile (``SECOND_MODEL``: the same weights under another name) is its own
  deployment, autoscaled between 1 and 2 replicas with the delays set low for the test (upscale at
  once, downscale 5 s after the load has stayed below ``target_ongoing_requests`` = 2);
  ``tests/e2e/test_llm_cluster.py`` bursts it to two replicas and back.

Keep this file additive: other e2e modules use it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.settings import LlmModelSettings, Settings
from tests.conftest import Cluster

LORA_ADAPTER = "smol-lora"
SECOND_MODEL = "smol-b"
E2E_TIMEOUT_S = 900
"""A test's limit here, fixtures included: the session's first test also waits for two engines to
start, which on this 2-core machine under other load can pass pytest's default 300 s."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


@dataclass(frozen=True)
class LlmApp:
    base_url: str  # OpenAI-compatible base URL, e.g. http://127.0.0.1:PORT/llm/v1
    model: str  # the name it is served as (it also answers to "default")
    ready_s: float  # how long the deployment took to become ready
    app_name: str = "llm"
    lora_adapter: str = LORA_ADAPTER  # a LoRA adapter of the primary model, served by that name
    second_model: str = SECOND_MODEL  # the second model profile (its own, autoscaled deployment)
    settings: Settings | None = None  # what the application was deployed from


def session_llm_settings(base: Settings, model_dir: Path, adapter_dir: Path) -> Settings:
    """The session app's settings: ``base`` plus the adapter and the autoscaled second model."""
    second = LlmModelSettings(
        name=SECOND_MODEL, model_dir=str(model_dir), min_replicas=1, max_replicas=2
    )
    overrides = {
        "llm_lora_modules": {LORA_ADAPTER: str(adapter_dir)},
        "llm_max_lora_rank": 8,
        "llm_models": [second],
        "llm_target_ongoing_requests": 2.0,
        "llm_upscale_delay_s": 0.0,
        "llm_downscale_delay_s": 5.0,
    }
    return Settings(**{**base.model_dump(), **overrides})


@contextmanager
def exported_to(tracing_env: dict[str, str]) -> Iterator[None]:
    """This process's environment with ``tracing_env`` added for a while (then as it was)."""
    before = {name: os.environ.get(name) for name in tracing_env}
    os.environ.update(tracing_env)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="package")  # the engines stop when the e2e tier ends (memory, idle CPU)
def llm_app(ray_cluster: Cluster, serve_port: int) -> Iterator[LlmApp]:
    from ray import serve

    from cluster.serve_apps import placed_llm_app
    from serving.llm import LLM_APP_NAME, LLM_ROUTE_PREFIX, engine_spec
    from serving.model_setup import ensure_local_model
    from tests.e2e.lora import write_lora_adapter

    base = ray_cluster.settings
    model_dir = ensure_local_model(progress=True, settings=base)  # conversion progress shown here
    adapter_dir = write_lora_adapter(model_dir, ray_cluster.data_dir / "lora" / LORA_ADAPTER)
    settings = session_llm_settings(base, model_dir, adapter_dir)
    started = time.monotonic()
    # As `wonder up` deploys it (placed; replicas at WONDER_LLM_NICENESS in their own runtime
    # env). No model_dir: the replicas prepare the model on their own node (a cache hit).
    # The OTLP variables of a session that exports to Phoenix are handed to the replicas as
    # `wonder up` hands them on: from the deploying process's environment (``otel_env``).
    with exported_to(ray_cluster.tracing_env):
        app = placed_llm_app(settings)
    serve.run(app, name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
    ready_s = time.monotonic() - started
    print(f"\nLLM application (2 deployments) ready in {ready_s:.1f} s")
    try:
        yield LlmApp(
            base_url=f"http://127.0.0.1:{serve_port}{LLM_ROUTE_PREFIX}/v1",
            model=engine_spec(settings).served_names[0],
            ready_s=ready_s,
            app_name=LLM_APP_NAME,
            settings=settings,
        )
    finally:
        serve.delete(LLM_APP_NAME)  # stops the engines (and their EngineCore processes) first
