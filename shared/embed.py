"""Embedders: one interface, two implementations (Ollama over HTTP, the in-process ONNX model).

``make_embedder`` picks one from the settings: Ollama when ``ZAPOMNI_OLLAMA_URL`` is set, the
in-process model otherwise. There is no fallback from one to the other: their vectors do not
share a space, so a namespace records which model built it and refuses the other.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from shared.settings import Settings


class Embedder(Protocol):
    name: str  # "onnx:<model>" or "ollama:<model>", recorded per namespace

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in order."""
        ...

    async def dimension(self) -> int: ...

    async def aclose(self) -> None: ...


def make_embedder(settings: Settings) -> Embedder:
    if settings.ollama_url:
        from shared.embed_ollama import OllamaEmbedder

        return OllamaEmbedder(
            settings.ollama_url,
            settings.ollama_model,
            concurrency=settings.ollama_concurrency,
            batch=settings.embed_batch,
            timeout=settings.ollama_timeout,
            retries=settings.ollama_retries,
        )
    from shared.embed_onnx import OnnxEmbedder

    return OnnxEmbedder(threads=settings.onnx_threads, batch=settings.embed_batch)


def to_params(vectors: np.ndarray) -> list[list[float]]:
    """Vectors as query parameters: the FalkorDB client sends parameters as Cypher text, so
    round to float32-level precision first (half the text, same vector once stored as vecf32)."""
    return np.round(vectors.astype(np.float64), 7).tolist()
