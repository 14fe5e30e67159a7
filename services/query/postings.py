"""The keyword pool chosen in the query service from each term's postings, which are cached
per (namespace, term) behind the namespace's write stamp (as document frequencies are:
services/query/frequencies.py). FalkorDB's full-text procedure yields every posting of a term
and its per-chunk sum costs ~5 µs a posting: at 100k chunks the pool query was p95 124 ms.
Here a term's postings (node id, chunk id, the index's term score) are read once per stamp,
without the client's per-cell parsing, and summed with numpy; the pool is the same as the
pool query's: sum of idf x score over the pool terms, best first, ties by chunk id. Then
one query reads the rows of the best ones. A search with filters still sums in FalkorDB."""

from __future__ import annotations

from typing import Any

import numpy as np
from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.frequencies import StampedCache
from zapomni.shared.store import cypher_search
from zapomni.shared.store.graphstore import run_cells

# postings held over all terms (~110 B each), oldest terms out first: 1M held less than the
# terms of the README's 300 questions at 100k chunks, which then re-read postings (p95 143 ms)
CACHED_POSTINGS = 2_000_000


class TermPostings:
    """One term's postings: node ids, chunk ids and the index's score, aligned."""

    __slots__ = ("chunk_ids", "node_ids", "scores")

    def __init__(self, node_ids: np.ndarray, chunk_ids: np.ndarray, scores: np.ndarray) -> None:
        self.node_ids, self.chunk_ids, self.scores = node_ids, chunk_ids, scores

    def __len__(self) -> int:
        return len(self.node_ids)


# (namespace, term) -> postings, bounded by the postings held
CACHE = StampedCache(CACHED_POSTINGS, size=len)


async def term_postings(graph: AsyncGraph, namespace: str, stamp: str, words: list[str],
                        cache: StampedCache = CACHE) -> dict[str, TermPostings]:
    """The postings of ``words`` at ``stamp`` (read before: a write in between leaves them
    under the old stamp), read from FalkorDB for the words the cache does not hold."""
    found = cache.get(namespace, stamp, words)
    missing = [w for w in words if w not in found]
    if missing:
        rows = await run_cells(graph, cypher_search.KEYWORD_POSTINGS, {"terms": missing})
        fetched = split_postings(missing, rows)
        cache.put(namespace, stamp, fetched)
        found |= fetched
    return found


def split_postings(words: list[str], rows: list[list[Any]]) -> dict[str, TermPostings]:
    """Rows of (term, node id, chunk id, score) as one TermPostings per word (by columns:
    ~30,000 rows a common question's terms bring take ~10 ms so, ~60 ms row by row)."""
    if not rows:
        empty = TermPostings(np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0))
        return dict.fromkeys(words, empty)
    term, node, chunk, score = (np.array(column, dtype=dtype) for column, dtype in zip(
        zip(*rows, strict=True), (object, np.int64, object, np.float64), strict=True))
    found = {}
    for word in words:
        mine = term == word
        found[word] = TermPostings(node[mine], chunk[mine], score[mine])
    return found


def choose_pool(weighted: list[list[Any]], postings: dict[str, TermPostings],
                over: int) -> list[tuple[str, int, float, list[str]]]:
    """The pool query's first ``over`` chunks: (chunk id, its node id, sum of idf x score
    over the ``weighted`` terms that match it, those terms), best first, ties by chunk id.
    Summed in the terms' order, as FalkorDB sums them."""
    lists = [postings[term] for term, _ in weighted]
    if not any(len(p) for p in lists):
        return []
    node_ids = np.concatenate([p.node_ids for p in lists])
    weights = np.concatenate([p.scores * idf for p, (_, idf) in zip(lists, weighted,
                                                                       strict=True)])
    unique, first, inverse = np.unique(node_ids, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=weights, minlength=len(unique))
    if len(sums) > over:
        floor = np.partition(sums, len(sums) - over)[len(sums) - over]
        keep = np.flatnonzero(sums >= floor)  # ties at the floor: their chunk ids decide
    else:
        keep = np.arange(len(sums))
    chunk_ids = np.concatenate([p.chunk_ids for p in lists])[first[keep]]
    best = sorted(zip((-sums[keep]).tolist(), chunk_ids.tolist(), keep.tolist(),
                      strict=True))[:over]
    matched = terms_matched(weighted, [len(p) for p in lists], inverse, [b[2] for b in best])
    return [(cid, int(unique[at]), -neg, matched[at]) for neg, cid, at in best]


def terms_matched(weighted: list[list[Any]], lengths: list[int], inverse: np.ndarray,
                  chosen: list[int]) -> dict[int, list[str]]:
    """For each chosen chunk (its index among the unique nodes), the terms whose postings
    hold it, in the terms' order. ``inverse``: each posting's unique node, the terms'
    postings one after another."""
    term_of = np.repeat(np.arange(len(lengths)), lengths)
    hit = np.flatnonzero(np.isin(inverse, chosen))
    matched: dict[int, list[str]] = {at: [] for at in chosen}
    for at, term in zip(inverse[hit].tolist(), term_of[hit].tolist(), strict=True):
        matched[at].append(weighted[term][0])
    return matched


def pool_rows(chosen: list[tuple[str, int, float, list[str]]], rows: list[list[Any]],
              pool: int) -> list[list[Any]]:
    """The first ``pool`` chosen chunks that KEYWORD_POOL_ROWS found visible, in the chosen
    order, as the pool query returns them: memory id, chunk id, text, score, offsets, the
    terms matched, the stored word count. A row whose node now holds another chunk (freed by
    a delete since the postings were read, and reused) is left out."""
    found = {row[0]: row for row in rows}
    out = []
    for chunk_id, node, score, matched in chosen:
        row = found.get(node)
        if row is not None and row[2] == chunk_id:
            out.append([row[1], chunk_id, row[3], score, row[4], row[5], matched, row[6]])
            if len(out) == pool:
                break
    return out
