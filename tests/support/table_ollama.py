"""An Ollama-API test server that answers with real MiniLM vectors at almost no CPU: a table of
the in-process model's vectors of real passages (tests/support/vectors.py, cached on disk),
looked up by text. For the scale benchmarks, where embedding 1M texts with the model is out
of reach and the model's CPU would hide the latency being measured.

A text in the table gets its own vector. Any other text is cut at line breaks (documents are
made of table passages on lines of their own, so a chunk is a run of them); its vector is the
normalised sum of the vectors of the pieces found in the table, the same augmentation as the
joined pairs of ``corpus`` (``fidelity`` measures its cosine to the model's own vector). A
text with no piece in the table (a chunk cut inside a passage) gets a fixed small perturbation
of a real vector chosen by the text's hash. The only latency is the injected one: an
``asyncio.sleep`` per request, so 4 workers x 32 requests in flight cost the server little."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import msgspec
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from zapomni.shared.embedding.embed_onnx import OnnxEmbedder

_encode = msgspec.json.Encoder().encode
NOISE = 0.05  # norm of the perturbation of a real vector (cosine to it ~0.999)


class EmbedRequest(msgspec.Struct):
    model: str
    input: list[str] | str


_decode = msgspec.json.Decoder(EmbedRequest).decode


class TableOllama:
    """``texts`` and ``vectors`` (unit float32 rows): the table. Counts requests, texts,
    texts answered from the table whole (``exact``), from pieces (``joined``) and by
    perturbation (``perturbed``), and the most requests in flight at once."""

    def __init__(self, texts: list[str], vectors: np.ndarray, *,
                 model: str = "nomic-embed-text", latency: float = 0.0) -> None:
        self.rows = {text: i for i, text in enumerate(texts)}
        self.vectors = vectors.astype(np.float32)
        self.model = model
        self.latency = latency
        self.requests = self.texts = self.exact = self.joined = self.perturbed = 0
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/api/embed", self.embed, methods=["POST"])])

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = self.texts = self.exact = self.joined = self.perturbed = 0
            self.max_in_flight = 0

    async def embed(self, request: Request) -> Response:
        body = _decode(await request.body())
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            if body.model != self.model:
                return JSONResponse(
                    {"error": f"model \"{body.model}\" not found, try pulling it first"},
                    status_code=404)
            texts = body.input if isinstance(body.input, list) else [body.input]
            payload = {"model": body.model, "embeddings": self.lookup(texts).tolist()}
            return Response(_encode(payload), media_type="application/json")
        finally:
            with self._lock:
                self.in_flight -= 1

    def lookup(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.vectors.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.vector(text)
        with self._lock:
            self.texts += len(texts)
        return out

    def vector(self, text: str) -> np.ndarray:
        row = self.rows.get(text)
        if row is not None:
            self.exact += 1
            return self.vectors[row]
        found = [r for r in (self.rows.get(p.strip()) for p in text.split("\n"))
                 if r is not None]
        if found:
            self.joined += 1
            total = self.vectors[found].sum(axis=0)
            return total / max(float(np.linalg.norm(total)), 1e-12)
        self.perturbed += 1
        return perturbed(self.vectors, text)


def perturbed(vectors: np.ndarray, text: str) -> np.ndarray:
    """A real vector picked by the text's hash, moved by a fixed random step of norm NOISE."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    base = vectors[int(rng.integers(len(vectors)))]
    step = rng.standard_normal(vectors.shape[1]).astype(np.float32)
    moved = base + NOISE * step / np.linalg.norm(step)
    return moved / np.linalg.norm(moved)


def fidelity(server: TableOllama, texts: list[str]) -> float:
    """Mean cosine between the server's vector of each text and the model's own embedding."""
    if not texts:
        return 1.0
    truth = OnnxEmbedder(batch=8).embed_sync(texts)
    served = np.vstack([server.vector(t) for t in texts])
    return float(np.mean(np.sum(truth * served, axis=1)))
