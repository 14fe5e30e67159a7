"""Embedders: one interface, two implementations (Ollama over HTTP, the in-process ONNX model).

``make_embedder`` picks one from the settings: Ollama when ``ZAPOMNI_OLLAMA_URL`` is set, the
in-process model otherwise. There is no fallback from one to the other: their vectors do not
share a space, so a namespace records which model built it and refuses the other.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from redis.asyncio import Redis

from zapomni.shared import metrics
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.vector_cache import VectorCache
from zapomni.shared.settings import Settings
from zapomni.shared.store.falkordb_internals import ListLiteral, number_list


class Embedder(Protocol):
    name: str  # "onnx:<model>" or "ollama:<model>", recorded per namespace

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in order."""
        ...

    async def dimension(self) -> int: ...

    async def aclose(self) -> None: ...


def make_embedder(settings: Settings, *, worker: bool = False) -> Embedder:
    """``worker``: a worker's in-process model, which shares the host's cores with the other
    workers (embed_onnx.WORKER_THREADS, no spinning) unless ``onnx_threads`` says otherwise."""
    if settings.ollama_url:
        from zapomni.shared.embedding.embed_ollama import OllamaEmbedder  # loaded only when chosen

        return OllamaEmbedder(settings.ollama_url, settings.ollama_model)
    from zapomni.shared.embedding.embed_onnx import WORKER_THREADS, OnnxEmbedder

    if worker:
        return OnnxEmbedder(threads=settings.onnx_threads or WORKER_THREADS, spinning=False)
    return OnnxEmbedder(threads=settings.onnx_threads)


def to_params(vectors: np.ndarray, decimals: int | None = 7) -> list[ListLiteral]:
    """Vectors as query parameters, rounded to float32-level precision first (7 decimals:
    a shorter text, the same vector once stored as vecf32); ``None`` keeps every digit."""
    values = vectors.astype(np.float64)
    if decimals is not None:
        values = np.round(values, decimals)
    return [number_list(row) for row in values.tolist()]


# chunk vectors kept in Redis by model + text: 30 days, at most 100,000 of them, the oldest
# dropped first (1.8 KB each at 384 dimensions: 170 MB in all, docs/benchmarks.md "The
# embedding cache"; ~3.3 KB at 768)
CACHE_DAYS = 30
CACHE_MAX = 100_000


class CachedEmbedder:
    """Vectors cached in Redis (shared/embedding/vector_cache.py); the wrapped embedder
    computes the misses: re-ingesting a text (a retried job, a re-added document, a benchmark
    re-run) costs no embedding."""

    def __init__(self, inner: Embedder, redis: Redis, ttl_seconds: int, limit: int) -> None:
        self.inner = inner
        self.name = inner.name
        self._redis = redis
        self._cache = VectorCache("zapomni:emb", inner.name, ttl_seconds, limit)

    async def dimension(self) -> int:
        return await self.inner.dimension()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def embed(self, texts: list[str]) -> np.ndarray:
        found = await vector_cache.read(self._redis, self._cache, texts)
        missing = [i for i, raw in enumerate(found) if not raw]
        metrics.EMBED_CACHE.labels("hit").inc(len(texts) - len(missing))
        metrics.EMBED_CACHE.labels("miss").inc(len(missing))
        fresh = await self.inner.embed([texts[i] for i in missing]) if missing else None
        out = np.zeros((len(texts), await self.dimension()), dtype=np.float32)
        for i, raw in enumerate(found):
            if raw:
                out[i] = np.frombuffer(raw, dtype=np.float32)
        if fresh is not None:
            out[missing] = fresh
            await vector_cache.write(self._redis, self._cache, [texts[i] for i in missing],
                                     fresh)
        return out
