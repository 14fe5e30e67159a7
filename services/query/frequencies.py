"""Document frequencies of the keyword signal's terms, cached per (namespace, term) behind the
namespace's write stamp: workers stamp it afresh after every write or delete of chunks
(workers/store.py), so a namespace nobody wrote to since is never counted again. Counting a
term's postings in FalkorDB's full-text index is p95 43 ms at 100k chunks; a cached term
costs a dict lookup. A namespace never stamped (written before the stamp existed) is counted
on every search, as before, until its next write."""

from __future__ import annotations

from collections import OrderedDict

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared import cypher
from zapomni.shared.graphstore import run

CACHED_TERMS = 50_000  # (namespace, term) entries kept, least recently used out first


class DocFrequencies:
    """A bounded LRU of (namespace, term) -> (stamp, document frequency); lives as long as
    the query service."""

    def __init__(self, capacity: int = CACHED_TERMS) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()

    def get(self, namespace: str, stamp: str | None, words: list[str]) -> dict[str, int]:
        """The cached frequencies of ``words`` counted at ``stamp``; stale ones are left out."""
        found: dict[str, int] = {}
        if stamp is None:
            return found
        for word in words:
            entry = self._entries.get((namespace, word))
            if entry is not None and entry[0] == stamp:
                self._entries.move_to_end((namespace, word))
                found[word] = entry[1]
        return found

    def put(self, namespace: str, stamp: str | None, counted: dict[str, int]) -> None:
        if stamp is None or self.capacity <= 0:
            return
        for word, df in counted.items():
            self._entries[(namespace, word)] = (stamp, df)
            self._entries.move_to_end((namespace, word))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


CACHE = DocFrequencies()


async def read_stamp(graph: AsyncGraph) -> str | None:
    """The namespace's write stamp, None if no worker stamped it yet."""
    rows = await run(graph, cypher.READ_WRITES, read_only=True)
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


async def document_frequencies(graph: AsyncGraph, namespace: str, words: list[str],
                               cache: DocFrequencies = CACHE
                               ) -> tuple[dict[str, int], str | None]:
    """How many chunks of the namespace each word matches (0 for none), counted only for the
    words the cache does not hold at the current stamp; and that stamp. The stamp is read
    before counting: a write in between leaves the entry under the old stamp, never the new
    one."""
    stamp = await read_stamp(graph)
    df = cache.get(namespace, stamp, words)
    missing = [w for w in words if w not in df]
    if missing:
        rows = await run(graph, cypher.KEYWORD_DF_ALL, {"terms": missing}, read_only=True)
        counted = dict.fromkeys(missing, 0) | {term: int(count) for term, count in rows}
        cache.put(namespace, stamp, counted)
        df |= counted
    return df, stamp
