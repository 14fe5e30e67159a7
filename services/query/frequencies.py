"""Document frequencies of the keyword signal's terms, cached per (namespace, term) behind the
namespace's write stamp: workers stamp it afresh after every write or delete of chunks
(workers/store.py), so a namespace nobody wrote to since is never counted again. A term is
counted in the walk of its postings that reads its first postings too
(services/query/postings.py, ``first_reads``); a cached term costs a dict lookup."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

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

