"""Real MiniLM vectors of real text for the index benchmarks: sentences and runs of adjacent
sentences from the evaluation sets in ../shared/data, embedded by the product's in-process
model and cached on disk (tests/bench/.cache/vectors) by model and text, so a re-run embeds
nothing. Queries are the sets' own questions and claims.

The in-process model embeds a sentence in about 10-20 ms on this machine's 2 cores, so 100k
real vectors would take half an hour; ``corpus`` tops a smaller real set up with passages
made of two real ones joined, whose vector is the normalised sum of the two (mean pooling
over the joined tokens is close to that; ``augmentation_fidelity`` measures how close)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from zapomni.shared.embedding.embed_onnx import OnnxEmbedder

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
CACHE = ROOT / "tests" / "bench" / ".cache" / "vectors"
SETS = ("scifact", "hotpotqa_train100", "musique_train100")
REAL = 20_000  # passages the benchmarks embed (about 6 minutes, once)
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def jsonl(path: Path) -> Iterator[dict]:
    with path.open() as lines:
        for line in lines:
            yield json.loads(line)


def paragraphs() -> Iterator[str]:
    for name in SETS:
        for doc in jsonl(DATA / name / "corpus.jsonl"):
            title = doc.get("title", "").rstrip(".")
            yield f"{title}. {doc['text']}" if title else doc["text"]
    for turn in jsonl(DATA / "locomo" / "turns.jsonl"):
        yield f"{turn['speaker']}: {turn['text']}"


def passages(count: int) -> list[str]:
    """``count`` distinct passages: every sentence first, then pairs of adjacent sentences
    (a longer, realistic chunk), then triples, until there are enough."""
    split = [[s for s in SENTENCE.split(p) if len(s) > 20] for p in paragraphs()]
    seen: dict[str, None] = {}
    for width in (1, 2, 3, 4):
        for sentences in split:
            for start in range(0, max(1, len(sentences) - width + 1)):
                seen.setdefault(" ".join(sentences[start : start + width]), None)
                if len(seen) == count:
                    return list(seen)
    raise ValueError(f"the evaluation sets hold fewer than {count} passages ({len(seen)})")


def questions(count: int) -> list[str]:
    asked = [q["text"] for name in SETS for q in jsonl(DATA / name / "queries.jsonl")]
    asked += [q["question"] for q in jsonl(DATA / "locomo" / "qa.jsonl")]
    step = max(1, len(asked) // count)
    return asked[::step][:count]


def embedded(texts: list[str], embedder: OnnxEmbedder | None = None,
             progress: bool = True) -> np.ndarray:
    """Unit float32 vectors of ``texts`` from the cache, or embedded now (and cached)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"{OnnxEmbedder.name.replace(':', '_')}-{len(texts)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    embedder = embedder or OnnxEmbedder(batch=32)
    out = np.zeros((len(texts), 384), dtype=np.float32)
    started, step = time.perf_counter(), 2048
    for start in range(0, len(texts), step):
        out[start : start + step] = embedder.embed_sync(texts[start : start + step])
        if progress:
            done = min(len(texts), start + step)
            rate = done / (time.perf_counter() - started)
            print(f"  embedded {done:,}/{len(texts):,} ({rate:.0f}/s)", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def corpus(count: int, real: int = REAL, seed: int = 7) -> tuple[list[str], np.ndarray]:
    """``count`` passages and their vectors: ``real`` embedded, the rest joined pairs. Any
    count up to ``real`` is a prefix of the same cached set."""
    texts = passages(real)
    vectors = embedded(texts)
    if count <= real:
        return texts[:count], vectors[:count]
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, real, size=(count - real, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    while len(pairs) < count - real:
        more = rng.integers(0, real, size=(count - real - len(pairs), 2))
        pairs = np.vstack([pairs, more[more[:, 0] != more[:, 1]]])
    joined = vectors[pairs[:, 0]] + vectors[pairs[:, 1]]
    joined /= np.linalg.norm(joined, axis=1, keepdims=True)
    texts += [f"{texts[a]} {texts[b]}" for a, b in pairs.tolist()]
    return texts, np.vstack([vectors, joined.astype(np.float32)])


def augmentation_fidelity(texts: list[str], vectors: np.ndarray, real: int,
                          sample: int = 64) -> float:
    """Mean cosine between a joined passage's vector and the model's embedding of its text."""
    if len(texts) <= real:
        return 1.0
    rows = np.linspace(real, len(texts) - 1, num=sample, dtype=int)
    truth = OnnxEmbedder(batch=32).embed_sync([texts[i] for i in rows])
    return float(np.mean(np.sum(truth * vectors[rows], axis=1)))


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Row indexes of each query's k nearest vectors by cosine (vectors are unit length)."""
    scores = queries @ vectors.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1)
