"""The keyword pool without filters: the chunks with the highest BM25 over the pool's terms,
from the postings the workers keep beside the graph (shared/store/postings.py). Every posting
of each term is read (one Redis string a term) and summed in numpy: BM25 of each posting
from its count and its chunk's length (the namespace's average length), added into an array
indexed by chunk number. That is the exhaustive sum, so no bound can cut a chunk it should
keep; at 1M chunks a question's pool terms hold 154k / 264k postings (p50 / p95), ~2 MB, and
read and summed in 11.8 / 15.7 ms (docs/benchmarks.md, "Keyword postings of our own").

The best chunks are then looked up, best first, ties by chunk number, and those visible kept:
a number no longer its chunk's (deleted since the dead numbers were read) is skipped, and the
next best read."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.keyword import K1, B
from zapomni.shared.store import cypher_search, postings
from zapomni.shared.store.graphstore import run_cells
from zapomni.shared.text.words import stem

# lookups of the next best chunks when some were not visible (expired, replaced, still
# landing, or deleted since the dead numbers were read) and left the pool short
ROUNDS = 8
# reads of the pool, at most, while the compaction frees numbers (it moves its epoch once a
# batch of numbers, a few times a pass: a search overlaps one rarely, two almost never)
READS = 3


class Scored:
    """Every chunk a pool term is in: its number, its sum, and which terms (bits) are in it."""

    __slots__ = ("masks", "scores", "seqs")

    def __init__(self, seqs: np.ndarray, scores: np.ndarray, masks: np.ndarray) -> None:
        self.seqs, self.scores, self.masks = seqs, scores, masks

    def best(self, count: int) -> np.ndarray:
        """Where the first ``count`` chunks by score are, best first, ties by number (the
        whole tie at the cut is sorted, so the cut is the same whatever the order read)."""
        if count < len(self.scores):
            edge = -np.partition(-self.scores, count - 1)[count - 1]
            among = np.flatnonzero(self.scores >= edge)
        else:
            among = np.arange(len(self.scores))
        return among[np.lexsort((self.seqs[among], -self.scores[among]))][:count]


class Scratch(threading.local):
    """Arrays indexed by chunk number, kept between searches (a thread's own) and zeroed where
    a search wrote: allocating and first touching them each search cost more than the sums
    (24.5 ms of a 264k-posting search at 1M numbers, page faults mostly; docs/benchmarks.md)."""

    def __init__(self) -> None:
        self.total = np.zeros(0)
        self.masks = np.zeros(0, np.uint32)  # the terms in each chunk, a bit each

    def hold(self, size: int) -> None:
        if len(self.total) < size:
            size = max(size, 2 * len(self.total))
            self.total, self.masks = np.zeros(size), np.zeros(size, np.uint32)


SCRATCH = Scratch()


def score(weights: list[float], arrays: list[np.ndarray], average: float,
          dead: np.ndarray | None = None) -> Scored:
    """BM25 summed over the terms (``weights``: their idf, in the order of ``arrays``; at
    most 32, a bit each), the ``dead`` numbers (True where deleted) left out."""
    size = max((int(a["seq"].max()) for a in arrays if len(a)), default=0) + 1
    s = SCRATCH
    s.hold(size)
    norm_base = K1 * (1 - B)
    slope = K1 * B / max(average, 1.0)
    written: list[np.ndarray] = []
    try:
        for bit, (weight, found) in enumerate(zip(weights, arrays, strict=True)):
            at = found["seq"].astype(np.intp)
            written.append(at)
            tf = found["tf"].astype(np.float64)
            # a posting appended twice (a job that ran again) is added once: numpy's
            # buffered += writes each index once, and both hold the same value
            s.total[at] += weight * tf * (K1 + 1) / (tf + norm_base + slope * found["dl"])
            s.masks[at] |= np.uint32(1 << bit)
        seqs = np.flatnonzero(s.masks[:size])
        scores, masks = s.total[seqs], s.masks[seqs]
    finally:
        for at in written:
            s.total[at], s.masks[at] = 0, 0
    if dead is not None and len(dead):
        live = ~dead[np.minimum(seqs, len(dead) - 1)] | (seqs >= len(dead))
        seqs, scores, masks = seqs[live], scores[live], masks[live]
    return Scored(seqs, scores, masks)


async def keyword_pool(graph: AsyncGraph, weighted: list[list[Any]], pool: int,
                       params: dict[str, Any]) -> list[list[Any]]:
    """The first ``pool`` visible chunks by BM25 over the ``weighted`` [word, idf] pairs (one
    word a stem), as KEYWORD_POOL returns its rows: memory id, chunk id, text, score,
    offsets, the words matched, the stored word count. Read again when the compaction freed
    numbers while it read (one may have gone to another chunk: shared/store/postings.py)."""
    for _ in range(READS - 1):
        rows = await pool_once(graph, weighted, pool, params)
        if rows is not None:
            return rows
    return await pool_once(graph, weighted, pool, params, settled=False) or []


async def pool_once(graph: AsyncGraph, weighted: list[list[Any]], pool: int,
                    params: dict[str, Any], settled: bool = True) -> list[list[Any]] | None:
    """keyword_pool's rows, or None if the compaction's epoch moved while they were read
    (``settled``; else the rows anyway)."""
    stems = [stem(word) for word, _ in weighted]
    arrays, average, dead, epoch = await postings.read_terms(graph, stems)
    scored = score([weight for _, weight in weighted], arrays, average, dead)
    out: list[list[Any]] = []
    seen: set[str] = set()
    read = 0
    for _ in range(ROUNDS):
        at = scored.best(read + 2 * pool)[read:]
        if not len(at):
            break
        read += len(at)
        chunks, now = await postings.live_chunks(graph, scored.seqs[at].tolist())
        if settled and now != epoch:
            return None
        rows = await run_cells(graph, cypher_search.KEYWORD_POOL_ROWS, {
            "ids": [chunk for chunk in chunks if chunk], "now": params["now"],
            "superseded": params["superseded"]})
        found = {row[1]: row for row in rows}
        for i, chunk in zip(at.tolist(), chunks, strict=True):
            row = found.get(chunk)
            if row is None or chunk in seen:
                continue
            seen.add(chunk)
            mask = int(scored.masks[i])
            out.append([row[0], chunk, row[2], float(scored.scores[i]), row[3], row[4],
                        [w for bit, (w, _) in enumerate(weighted) if mask >> bit & 1], row[5]])
            if len(out) == pool:
                return out
    return out
