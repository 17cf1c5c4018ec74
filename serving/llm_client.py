"""``VllmHandleModel``: the local model as a ``ChatModel``, through a Serve deployment handle.

Actors call the LLM deployment's ``chat_stream`` method with ``options(stream=True)``: the
completion arrives as batches of OpenAI chunk payloads straight from the replica, with no HTTP
proxy in between, and is translated by the same ``StreamTranslator`` as the HTTP client. Tool
calling follows the request's mode (``core.llm.constrained``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from core.domain import DEFAULT_MODEL
from core.errors import RetryableError, Timeout, Unavailable, WonderError
from core.jsontypes import JsonObject
from core.llm.constrained import stream_chat
from core.llm.openai_http import StreamTranslator
from core.llm.protocol import ChatChunk, ChatRequest, TextDelta
from core.settings import settings_from_env, wonder_env
from core.tracing import current_traceparent
from serving.llm_config import deployment_for_model

# Where the deployment lives (serving.llm re-exports these). Kept here so that an actor calling
# the model imports neither FastAPI nor vLLM: only ``ray.serve``, when it first needs a handle.
LLM_APP_NAME = "llm"
LLM_ROUTE_PREFIX = "/llm"
LLM_DEPLOYMENT_NAME = "LLMServer"
DEFAULT_MODEL_ALIAS = DEFAULT_MODEL
"""Every deployment also answers to this name, so a profile need not know which model is served."""


@lru_cache(maxsize=16)
def _handle(app_name: str, deployment_name: str) -> Any:
    from ray import serve

    return serve.get_deployment_handle(deployment_name, app_name=app_name).options(stream=True)


@lru_cache(maxsize=64)
def _deployment_for(settings_items: tuple[tuple[str, str], ...], model: str) -> str:
    return deployment_for_model(settings_from_env(dict(settings_items)), model)


def conversation_key(body: JsonObject) -> str | None:
    """The affinity key of a chat body: its ``prompt_cache_key``, else a digest of the model and
    the first user message (the same for every call of a conversation's recent window, including
    the constrained mode's chooser and argument calls)."""
    explicit = body.get("prompt_cache_key")
    if explicit:
        return str(explicit)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            seed = json.dumps([body.get("model"), message.get("content")], sort_keys=True)
            return "p-" + hashlib.sha256(seed.encode()).hexdigest()[:24]
    return None


def prewarm(app_name: str = LLM_APP_NAME, deployment_name: str = LLM_DEPLOYMENT_NAME) -> None:
    """Import Serve and resolve the handle ahead of the first model call (a process's first call
    otherwise pays ≈ 0.5 s of imports on CPU). Safe to call from a background thread."""
    _handle(app_name, deployment_name)


@dataclass
class VllmHandleModel:
    """Streams chat completions from the local vLLM deployment (provider ``vllm``)."""

    model: str = "default"
    app_name: str = LLM_APP_NAME
    deployment_name: str | None = None
    """None: the deployment that serves ``model`` according to this process's settings
    (``WONDER_LLM_MODELS``), the primary one for ``default``."""
    affinity: bool = True
    """Send the conversation key as the Serve session id (the router keeps it on one replica)."""
    provider: str = "vllm"

    def target(self, model: str) -> str:
        if self.deployment_name is not None:
            return self.deployment_name
        if model in (DEFAULT_MODEL_ALIAS, ""):
            return LLM_DEPLOYMENT_NAME
        return _deployment_for(tuple(sorted(wonder_env().items())), model)

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return stream_chat(self, request)

    def sent_body(self, body: JsonObject) -> JsonObject:
        """The body the replica's engine receives: the served model's name, streamed, without
        the routing key (vLLM would log it as unknown)."""
        sent = {**body, "model": _model_name(body.get("model"), self.model), "stream": True}
        sent.pop("prompt_cache_key", None)
        return sent

    async def stream_body(self, body: JsonObject, timeout_s: float) -> AsyncIterator[ChatChunk]:
        """Stream one raw chat-completions body through the deployment handle (with the W3C
        context of the caller's span: the replica's span joins its trace)."""
        key = conversation_key(body) if self.affinity else None
        body = self.sent_body(body)
        translator = StreamTranslator(model=str(body["model"]))
        batches = self._payload_batches(body, key, current_traceparent())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                try:
                    # A deadline per step, not a timeout scope around the yields: the consumer
                    # may await other things between chunks.
                    batch = await asyncio.wait_for(anext(batches), deadline - loop.time())
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise Timeout(f"local model did not finish within {timeout_s:.0f} s") from exc
                for chunk in merge_text(
                    chunk for payload in batch for chunk in translator.feed(json.loads(payload))
                ):
                    yield chunk
        finally:
            await batches.aclose()
        for chunk in translator.finish():
            yield chunk

    async def _payload_batches(
        self, body: JsonObject, session: str | None, traceparent: str | None
    ) -> AsyncGenerator[list[str], None]:
        try:
            handle = _handle(self.app_name, self.target(str(body["model"])))
            if session:
                handle = handle.options(session_id=session)
            response = handle.chat_stream.remote(body, traceparent)
        except Exception as exc:
            raise _infrastructure_error(exc) from exc
        done = False
        try:
            async for batch in response:
                yield batch
            done = True
        except WonderError:
            raise
        except Exception as exc:
            raise _infrastructure_error(exc) from exc
        finally:
            if not done:
                response.cancel()  # the consumer stopped early: free the engine's slot


def merge_text(chunks: Iterable[ChatChunk]) -> Iterator[ChatChunk]:
    """Consecutive text deltas as one (a batch from the replica is one event, not one per
    token); every other chunk in its place."""
    text: list[str] = []
    for chunk in chunks:
        if isinstance(chunk, TextDelta):
            text.append(chunk.text)
            continue
        if text:
            yield TextDelta("".join(text))
            text = []
        yield chunk
    if text:
        yield TextDelta("".join(text))


def _model_name(requested: Any, configured: str) -> str:
    return str(requested) if requested and requested != "default" else configured


def _infrastructure_error(exc: Exception) -> WonderError:
    """Ray/Serve failures (no such app, replica died, actor unavailable) are worth a retry."""
    name = type(exc).__name__
    if "NotFound" in name or "does not exist" in str(exc):
        return Unavailable(f"the local model is not deployed ({name}: {exc})"[:500])
    return RetryableError(f"local model call failed ({name}: {exc})"[:500])
