"""The local model: vLLM inside a Ray Serve deployment (CPU by default, CUDA on a GPU cluster).

One deployment, two doors:

* HTTP, under ``LLM_ROUTE_PREFIX``: the OpenAI-compatible ``/v1/chat/completions`` (streaming or
  not) and ``/v1/models``, so the official ``openai`` client and any OpenAI tool can use the model.
* A deployment handle: ``chat_stream(body)`` streams the same completion chunks to actors without an
  HTTP hop (``serving.llm_client.VllmHandleModel``).

The replica runs vLLM's ``AsyncLLM`` engine with vLLM's own OpenAI serving layer (request
validation, chat template, tool parsing, structured outputs), exactly as ``vllm serve`` does; only
the routing is ours. We do not use ``ray.serve.llm`` here: on this kind of machine it took twice as
long to become ready and adds an ingress deployment whose handle API takes vLLM's request classes,
which would make every actor that calls the model import vLLM (see docs/local-model.md).

vLLM is imported inside the replica only: importing this module is cheap (the gateway and the CLI
import its constants).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve import Application, Deployment

from core.jsontypes import JsonObject
from core.settings import Settings
from serving.llm_client import (
    DEFAULT_MODEL_ALIAS,
    LLM_APP_NAME,
    LLM_DEPLOYMENT_NAME,
    LLM_ROUTE_PREFIX,
)

logger = logging.getLogger(__name__)

BUNDLED_MODEL_NAME = "SmolLM2-135M-Instruct"
TOOL_CALL_PARSER = "hermes"
"""Needed for vLLM to accept ``tools`` at all; named/required tool choice is grammar-constrained and
works with any parser, and ``auto`` only works for models trained on this format."""


__all__ = [
    "DEFAULT_MODEL_ALIAS",
    "LLM_APP_NAME",
    "LLM_DEPLOYMENT_NAME",
    "LLM_ROUTE_PREFIX",
    "EngineSpec",
    "LLMServer",
    "LocalEngine",
    "build_llm_app",
    "deploy_llm",
    "engine_spec",
]


@dataclass(frozen=True)
class EngineSpec:
    """Everything a replica needs to start vLLM (plain data: it is pickled into the replica).

    ``model_dir`` None means "prepare the model on the replica's own node" (convert the bundled
    GGUF or download ``WONDER_LLM_MODEL_DIR`` into that node's cache, with ``settings_env``): on a
    cluster the driver's disk is not the GPU worker's.
    """

    model_dir: str | None
    served_names: tuple[str, ...]
    device: str = "cpu"
    enforce_eager: bool = True
    max_model_len: int | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    settings_env: dict[str, str] = field(default_factory=dict)

    def cli_args(self) -> list[str]:
        """The arguments ``vllm serve`` would take for this engine."""
        if self.model_dir is None:
            raise ValueError("model_dir is unresolved: use EngineSpec.resolved() first")
        args = ["--model", self.model_dir, "--served-model-name", *self.served_names]
        args += ["--enable-auto-tool-choice", "--tool-call-parser", TOOL_CALL_PARSER]
        args += ["--disable-log-stats", "--disable-uvicorn-access-log"]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.max_model_len:
            args += ["--max-model-len", str(self.max_model_len)]
        return [*args, *self.extra_args]

    def resolved(self) -> EngineSpec:
        """This spec with a local model directory, preparing it on this node if needed."""
        if self.model_dir is not None:
            return self
        from core.settings import settings_from_env
        from serving.model_setup import ensure_local_model

        path = ensure_local_model(progress=True, settings=settings_from_env(self.settings_env))
        return replace(self, model_dir=str(path))


def engine_spec(settings: Settings, model_dir: Path | None = None) -> EngineSpec:
    """The engine configured from settings (device, names, vLLM env); ``model_dir`` None lets
    the replica prepare the model on its node."""
    device = settings.llm_device.lower()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"WONDER_LLM_DEVICE must be cpu or cuda, not {settings.llm_device!r}")
    source = settings.llm_model_dir
    name = settings.llm_model_name or (
        Path(source.rstrip("/")).name if source else BUNDLED_MODEL_NAME
    )
    names = (name,) if name == DEFAULT_MODEL_ALIAS else (name, DEFAULT_MODEL_ALIAS)
    env = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}  # never fork a Ray worker (threads, sockets)
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.llm_cpu_kvcache_gb)
    return EngineSpec(
        model_dir=str(model_dir) if model_dir is not None else None,
        served_names=names,
        device=device,
        enforce_eager=settings.llm_enforce_eager,
        max_model_len=settings.llm_max_model_len,
        env=env,
        settings_env=settings.env(),
    )


# --------------------------------------------------------------------------- the engine (no Ray)


class LocalEngine:
    """vLLM's ``AsyncLLM`` plus its OpenAI serving objects, in this process.

    Usable without Ray (benchmarks, experiments); the Serve deployment below wraps one.
    """

    def __init__(self, engine: Any, state: Any, spec: EngineSpec) -> None:
        self._engine = engine
        self._state = state
        self.spec = spec

    @classmethod
    async def start(cls, spec: EngineSpec) -> LocalEngine:
        os.environ.update(spec.env)
        from starlette.datastructures import State
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.cli_args import (
            make_arg_parser,
            validate_parsed_serve_args,
        )
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.v1.engine.async_llm import AsyncLLM

        _check_platform(spec.device)
        spec = await asyncio.to_thread(spec.resolved)
        started = time.monotonic()
        parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
        args = make_arg_parser(parser).parse_args(spec.cli_args())
        validate_parsed_serve_args(args)
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
        engine = AsyncLLM.from_vllm_config(config, disable_log_stats=True)
        state = State()
        tasks = await engine.get_supported_tasks()
        await init_app_state(engine, state, args, supported_tasks=tasks)
        logger.info(
            "vLLM ready in %.1f s (%s, %s)", time.monotonic() - started, spec.device, spec.model_dir
        )
        return cls(engine, state, spec)

    async def models(self) -> JsonObject:
        listing = await self._state.openai_serving_models.show_available_models()
        return dict(listing.model_dump())

    async def create(self, body: JsonObject) -> Any:
        """Run one chat completion: an async iterator of SSE strings when ``stream`` is set,
        else a response model. Invalid requests come back as vLLM's ``ErrorResponse``."""
        from pydantic import ValidationError
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        serving = self._state.openai_serving_chat
        try:
            request = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            return serving.create_error_response(f"invalid request: {exc.errors()[:3]}")
        try:
            return await serving.create_chat_completion(request)
        except ValueError as exc:
            return serving.create_error_response(exc)

    async def stream_payloads(self, body: JsonObject) -> AsyncIterator[str]:
        """The completion as JSON chunk payloads (the SSE ``data:`` values, without ``[DONE]``);
        an error becomes one ``{"error": ...}`` payload."""
        result = await self.create({**body, "stream": True})
        if not hasattr(result, "__aiter__"):
            yield json.dumps(result.model_dump())
            return
        async for event in result:
            for line in event.splitlines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield line[6:]

    async def check_health(self) -> None:
        await self._engine.check_health()

    def shutdown(self) -> None:
        self._engine.shutdown()


def _check_platform(device: str) -> None:
    from vllm.platforms import current_platform

    actual = "cpu" if current_platform.is_cpu() else "cuda" if current_platform.is_cuda() else "?"
    if actual != device:
        raise RuntimeError(
            f"WONDER_LLM_DEVICE={device} but the installed vLLM targets {actual}: install "
            f"{'vllm-cpu' if device == 'cpu' else 'vllm'} on this node (docs/local-model.md)"
        )


async def coalesce(source: AsyncIterator[str]) -> AsyncIterator[list[str]]:
    """Group whatever items are already waiting into one batch, never waiting for more.

    Under load this sends one handle message per engine step instead of one per token, and with a
    single stream it adds no delay: the first item of each batch goes out as soon as it exists.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(("item", item))
            queue.put_nowait(("end", None))
        except Exception as exc:  # handed to the consumer, which re-raises it
            queue.put_nowait(("error", exc))

    task = asyncio.create_task(pump())
    try:
        while True:
            batch: list[str] = []
            kind, value = await queue.get()
            while True:
                if kind == "error":
                    raise value
                if kind == "end":
                    if batch:
                        yield batch
                    return
                batch.append(value)
                if queue.empty():
                    break
                kind, value = queue.get_nowait()
            yield batch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


# --------------------------------------------------------------------------- the Serve deployment

api = FastAPI(title="Wonder local model (vLLM)", docs_url=None, redoc_url=None)


@serve.deployment(name=LLM_DEPLOYMENT_NAME, max_ongoing_requests=64, health_check_period_s=30)
@serve.ingress(api)
class LLMServer:
    """A vLLM engine as a Serve replica: OpenAI HTTP routes plus ``chat_stream`` for handles."""

    # Serve awaits an async constructor; mypy insists `__init__` returns None.
    async def __init__(self, spec: EngineSpec) -> None:  # type: ignore[misc]
        self._engine = await LocalEngine.start(spec)

    @api.get("/v1/models")
    async def list_models(self) -> JSONResponse:
        return JSONResponse(await self._engine.models())

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _openai_error(400, f"body is not JSON: {exc}")
        result = await self._engine.create(body)
        if hasattr(result, "__aiter__"):
            return StreamingResponse(result, media_type="text/event-stream")
        error = getattr(result, "error", None)
        status = int(getattr(error, "code", 200) or 200) if error is not None else 200
        return JSONResponse(result.model_dump(), status_code=status)

    async def chat_stream(self, body: JsonObject) -> AsyncIterator[list[str]]:
        """For deployment handles (``options(stream=True)``): batches of chunk payloads."""
        async for batch in coalesce(self._engine.stream_payloads(body)):
            yield batch

    async def check_health(self) -> None:
        await self._engine.check_health()

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.shutdown()


def _openai_error(status: int, message: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
    return JSONResponse(body, status_code=status)


def replica_options(spec: EngineSpec, settings: Settings) -> JsonObject:
    """Ray resources for one replica: a GPU when serving on CUDA, else one logical CPU."""
    options: JsonObject = {"num_cpus": 1, "runtime_env": {"env_vars": dict(spec.env)}}
    if spec.device == "cuda":
        options["num_gpus"] = 1
        if settings.llm_accelerator_type:
            options["accelerator_type"] = settings.llm_accelerator_type
    return {
        "ray_actor_options": options,
        "num_replicas": settings.llm_num_replicas,
    }


def build_llm_app(
    settings: Settings | Mapping[str, str], model_dir: Path | None = None
) -> Application:
    """The LLM Serve application; run it with ``serve.run(app, name=LLM_APP_NAME,
    route_prefix=LLM_ROUTE_PREFIX)``.

    Without ``model_dir`` each replica prepares the model on its own node (a no-op when that
    node's cache has it; ``wonder model setup`` fills the cache ahead of time). ``settings`` may
    also be ``Settings.env()``-style ``WONDER_*`` variables.
    """
    if not isinstance(settings, Settings):
        from core.settings import settings_from_env

        settings = settings_from_env(dict(settings))
    spec = engine_spec(settings, model_dir)
    deployment: Deployment = LLMServer  # type: ignore[assignment]  # the class decorators make it one
    return deployment.options(**replica_options(spec, settings)).bind(spec)


def deploy_llm(settings: Settings, model_dir: Path | None = None) -> None:
    """Deploy (or update) the LLM application on the connected Serve instance and wait until it
    answers (≈ 35 s on CPU; the first start on a node also converts the model, ≈ 25 s once)."""
    serve.run(build_llm_app(settings, model_dir), name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
