"""A real HTTP server that speaks Ollama's ``POST /api/embed`` (batched ``input``), for the
Ollama client's tests. Vectors come from the in-process MiniLM model (semantic) or from a
hash of the text (deterministic, any dimension). Latency, failures and hangs are injectable,
and it counts requests and the most requests it had in flight at once. ``gather`` makes
concurrency certain rather than likely: requests are held until that many are in flight.
``before_answer`` lets a test act at an exact moment of a worker's job: while it waits for
its vectors (awaited in the server's own thread and loop, with the request's texts)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Awaitable, Callable

import msgspec
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from zapomni.shared.embedding.embed_onnx import OnnxEmbedder

_encode = msgspec.json.Encoder().encode
# what shared/embedding/embed_ollama.py sends to learn a model's dimension
PROBE = ["dimension probe"]


def hash_vector(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim)
    return (vec / np.linalg.norm(vec)).tolist()


class FakeOllama:
    def __init__(self, *, models: tuple[str, ...] = ("nomic-embed-text",), dim: int = 768,
                 semantic: bool = False) -> None:
        self.models = set(models)
        self.dim = 384 if semantic else dim
        self.model = OnnxEmbedder() if semantic else None
        self.latency = 0.0
        self.fail_statuses: list[int] = []  # returned by the next requests, in order
        self.hang = False  # accept the request and never answer
        self.body: bytes | None = None  # answer 200 with this instead of embeddings
        # hold embedding requests (not a model's dimension probe) until this many are held at
        # once, then let all through from then on; after gather_timeout s, let them go anyway
        self.gather = 0
        self.gather_timeout = 60.0
        self.gathered = False
        self.held = 0
        # awaited with an embedding request's texts before it is answered (not the probe)
        self.before_answer: Callable[[list[str]], Awaitable[None]] | None = None
        self.requests = 0
        self.texts = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/api/embed", self.embed, methods=["POST"])])

    def reset_counts(self) -> None:
        self.requests = self.texts = self.max_in_flight = 0

    async def embed(self, request: Request) -> Response:
        body = msgspec.json.decode(await request.body())
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            status = self.fail_statuses.pop(0) if self.fail_statuses else 200
        try:
            if self.gather and not self.gathered and body.get("input") != PROBE:
                await self.gather_up()
            if self.before_answer is not None and body.get("input") != PROBE:
                await self.before_answer(list(body.get("input") or []))
            if self.hang:
                await asyncio.sleep(3600)
            if self.latency:
                await asyncio.sleep(self.latency)
            if status != 200:
                return JSONResponse({"error": f"injected failure {status}"}, status_code=status)
            if body.get("model") not in self.models:
                return JSONResponse(
                    {"error": f"model \"{body.get('model')}\" not found, try pulling it first"},
                    status_code=404)
            if self.body is not None:
                return Response(self.body, media_type="application/json")
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self.texts += len(texts)
            payload = {"model": body["model"], "embeddings": self.vectors(texts)}
            return Response(_encode(payload), media_type="application/json")
        finally:
            with self._lock:
                self.in_flight -= 1

    async def gather_up(self) -> None:
        with self._lock:
            self.held += 1
        deadline = time.monotonic() + self.gather_timeout
        try:
            while not self.gathered and time.monotonic() < deadline:
                with self._lock:
                    self.gathered = self.gathered or self.held >= self.gather
                await asyncio.sleep(0.005)
        finally:
            with self._lock:
                self.held -= 1

    def vectors(self, texts: list[str]) -> list[list[float]]:
        if self.model is not None:
            return self.model.embed_sync(texts).tolist()
        return [hash_vector(t, self.dim) for t in texts]
