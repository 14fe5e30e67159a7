"""Ollama embedder: batched ``POST /api/embed`` over one httpx2 connection pool, at most
``concurrency`` (32) requests in flight, retries with backoff on connect errors, timeouts and
5xx, and a clear error for a model that is not pulled.

The errors end up in task records that any caller of graph_status reads: they say what
failed and what to do, never Ollama's address or what its answer said. Those go to the
worker's log (the address without credentials, the answer cut to ``LOGGED_BODY_CHARS``).
"""

from __future__ import annotations

import asyncio
import logging

import httpx2
import msgspec
import numpy as np
import tenacity

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import EmbeddingRejected, EmbeddingUnavailable
from zapomni.shared.tls import tls_context

log = logging.getLogger(__name__)

# requests in flight per process: 32 kept the client's efficiency at 0.934 per process
# (docs/benchmarks.md, "Ollama concurrency efficiency"); texts per request: 16
CONCURRENCY = 32
BATCH = 16
TIMEOUT = 60.0  # seconds per request: a cold model loads within it
RETRIES = 4  # of a request, on connect errors, timeouts and 5xx (backoff with jitter)
LOGGED_BODY_CHARS = 200  # of a refusing answer, in the log line (one line of a terminal or two)
MODEL_HINT = ("check that ZAPOMNI_OLLAMA_MODEL names an embedding model that Ollama serves "
              "and that the texts fit its context")


class _Transient(Exception):
    """A failure worth another try; its argument says what it was."""


class EmbedResponse(msgspec.Struct):
    """The part of Ollama's /api/embed answer used here. msgspec decodes a batch of 16
    768-d vectors in a quarter of the time the standard json module takes (3.6 vs 14 ms)."""

    embeddings: list[list[float]] = []


_decode_response = msgspec.json.Decoder(EmbedResponse).decode


def _public(url: str) -> str:
    """The URL without credentials, for messages."""
    u = httpx2.URL(url)
    return str(u.copy_with(username=None, password=None)).rstrip("/")


class OllamaEmbedder:
    def __init__(self, url: str, model: str, *, concurrency: int = CONCURRENCY,
                 batch: int = BATCH, timeout: float = TIMEOUT, retries: int = RETRIES) -> None:
        self.name = f"ollama:{model}"
        self.model = model
        self._where = _public(url)
        self._batch = max(1, batch)
        self._retries = retries
        self._sem = asyncio.Semaphore(concurrency)
        self._client = httpx2.AsyncClient(
            base_url=url, timeout=httpx2.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx2.Limits(max_connections=concurrency,
                                 max_keepalive_connections=concurrency), verify=tls_context())
        self._dim: int | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def dimension(self) -> int:
        if self._dim is None:
            await self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    async def embed(self, texts: list[str]) -> np.ndarray:
        batches = [texts[i : i + self._batch] for i in range(0, len(texts), self._batch)]
        parts = await asyncio.gather(*(self._embed_batch(b) for b in batches))
        vectors = np.vstack(parts) if parts else np.zeros((0, self._dim or 0), np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)

    async def _embed_batch(self, batch: list[str]) -> np.ndarray:
        async with self._sem:
            metrics.EMBED_IN_FLIGHT.inc()
            try:
                with metrics.EMBED_REQUEST_SECONDS.time():
                    body = await self._post_with_retries({"model": self.model, "input": batch})
            finally:
                metrics.EMBED_IN_FLIGHT.dec()
        try:
            vectors = np.asarray(_decode_response(body).embeddings, dtype=np.float32)
        except (msgspec.DecodeError, ValueError):
            vectors = np.zeros((0,), dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(batch):
            log.warning("ollama at %s answered /api/embed with %d embeddings for %d texts",
                        self._where, len(vectors), len(batch))
            raise EmbeddingRejected(
                f"the embedder (Ollama) returned {len(vectors)} embeddings for {len(batch)} "
                f"texts; is '{self.model}' an embedding model? (ZAPOMNI_OLLAMA_MODEL)"
            )
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            raise EmbeddingRejected(
                f"Ollama model '{self.model}' changed dimension ({self._dim} -> "
                f"{vectors.shape[1]})"
            )
        return vectors

    async def _post_with_retries(self, payload: dict) -> bytes:
        """The answer's body; connect errors, timeouts and 5xx are tried again after a random
        wait of up to 0.5 s, doubling to 4 s; a 4xx is refused at once."""
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(_Transient), reraise=True,
            stop=tenacity.stop_after_attempt(self._retries + 1),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=4.0))
        try:
            return await retrying(self._post, payload)
        except _Transient as exc:
            log.warning("ollama at %s unavailable after %d attempts: %s", self._where,
                        self._retries + 1, exc.args[0])
            raise EmbeddingUnavailable(
                f"the embedder (Ollama) is unavailable ({exc.args[0]}) after "
                f"{self._retries + 1} attempts; the job will retry. If this lasts, check that "
                "Ollama is running and that the workers reach it at ZAPOMNI_OLLAMA_URL"
            ) from None

    async def _post(self, payload: dict) -> bytes:
        try:
            response = await self._client.post("/api/embed", json=payload)
        except httpx2.TimeoutException:
            raise _Transient("timed out") from None
        except httpx2.TransportError:
            raise _Transient("cannot connect") from None
        if response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise self._rejected(response)
        return response.content

    def _rejected(self, response: httpx2.Response) -> EmbeddingRejected:
        try:
            detail = str(response.json().get("error", ""))
        except (ValueError, AttributeError):
            detail = response.text
        log.warning("ollama at %s refused /api/embed with HTTP %d: %r", self._where,
                    response.status_code, detail[:LOGGED_BODY_CHARS])
        if response.status_code == 404 or "not found" in detail.lower():
            return EmbeddingRejected(
                f"the embedder (Ollama) does not have the model '{self.model}': run "
                f"`ollama pull {self.model}` where Ollama runs, or set ZAPOMNI_OLLAMA_MODEL "
                "to a model it has"
            )
        return EmbeddingRejected(
            f"the embedder (Ollama) refused the request (HTTP {response.status_code}; its "
            f"answer is in the worker's log); {MODEL_HINT}"
        )
