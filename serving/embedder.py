"""Reaching the Embedder deployment (``serving.embedder_app``) from actors, tasks and the gateway.

This module stays light: ``ray.serve`` (≈ 110 MiB and 1.3 s to import) is loaded only when a
process first looks for the deployment, so conversation actors that never embed do not pay for it.

``get_embedder()`` is what actions, the gateway and jobs call: the deployment when it is up,
otherwise the same model in-process (jobs, tests, a laptop without ``wonder up``). Both implement
``core.memory.embedding.Embedder`` and give the same vectors.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import Unavailable
from core.memory.embedding import (
    Embedder,
    SentenceTransformerEmbedder,
    Vector,
)

logger = logging.getLogger(__name__)

EMBEDDER_APP = "embedder"
# Where Serve is not up, look again after this long (it may have been deployed meanwhile).
RECHECK_S = 30.0


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
        from ray import serve  # heavy: only processes that embed import it

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
