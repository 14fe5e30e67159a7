"""Document frequencies of the keyword signal's terms, cached per (namespace, term) behind the
namespace's write stamp: workers stamp it afresh after every write or delete of chunks
(workers/store.py), so a namespace nobody wrote to since is never counted again. Counting a
term's postings in FalkorDB's full-text index is p95 43 ms at 100k chunks; a cached term
costs a dict lookup."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.store import cypher_search
from zapomni.shared.store.graphstore import run

CACHED_TERMS = 50_000  # (namespace, term) entries kept, least recently used out first


class StampedCache:
    """A bounded LRU of (namespace, term) -> (stamp, value), a value valid while the namespace's
    stamp is the one it was read at; bounded by the sum of ``size(value)`` (1 a term unless
    told); lives as long as the query service. Capacity 0: nothing is kept."""

    def __init__(self, capacity: int, size: Callable[[Any], int] = lambda _: 1) -> None:
        self.capacity = capacity
        self.size = size
        self.held = 0
        self._entries: OrderedDict[tuple[str, str], tuple[str, Any]] = OrderedDict()

    def get(self, namespace: str, stamp: str, words: list[str]) -> dict[str, Any]:
        """The cached values of ``words`` read at ``stamp``; stale ones are left out."""
        found: dict[str, Any] = {}
        for word in words:
            entry = self._entries.get((namespace, word))
            if entry is not None and entry[0] == stamp:
                self._entries.move_to_end((namespace, word))
                found[word] = entry[1]
        return found

    def put(self, namespace: str, stamp: str, values: dict[str, Any]) -> None:
        if self.capacity <= 0:
            return
        for word, value in values.items():
            old = self._entries.pop((namespace, word), None)
            self.held += self.size(value) - (self.size(old[1]) if old else 0)
            self._entries[(namespace, word)] = (stamp, value)
        while self.held > self.capacity and self._entries:
            self.held -= self.size(self._entries.popitem(last=False)[1][1])

    def clear(self) -> None:
        self._entries.clear()
        self.held = 0

    def __len__(self) -> int:
        return len(self._entries)


CACHE = StampedCache(CACHED_TERMS)


async def document_frequencies(graph: AsyncGraph, namespace: str, words: list[str],
                               stamp: str, cache: StampedCache = CACHE
                               ) -> dict[str, int]:
    """How many chunks of the namespace each word matches (0 for none), counted only for the
    words the cache does not hold at ``stamp``, the namespace's write stamp as read before
    (cypher_schema.SEARCH_STATE): a write in between leaves the entry under the old stamp, never
    the new one."""
    df = cache.get(namespace, stamp, words)
    missing = [w for w in words if w not in df]
    if missing:
        rows = await run(graph, cypher_search.KEYWORD_DF_ALL, {"terms": missing}, read_only=True)
        counted = dict.fromkeys(missing, 0) | {term: int(count) for term, count in rows}
        cache.put(namespace, stamp, counted)
        df |= counted
    return df
