"""The keyword signal's document frequencies are counted as chunks are written and deleted
(shared/store/postings.py): a search after passages with a term are added, or deleted, ranks
with the new frequencies. Chunks keep their word count."""

from __future__ import annotations

from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store import postings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.text.words import count_words

QUERY = "kestrel harbour"


async def first_hit(front) -> str:
    request = decode_search(QUERY, 10, None, None, "keyword")
    return (await front.query.call("/v1/search", request, SearchResponse)).results[0].memory_id


async def add(front, text: str) -> str:
    return (await ops.add_memory(front, decode_add_memory(text, None, None))).memory_id


async def test_a_search_after_writes_and_deletes_sees_the_new_frequencies(settings, front,
                                                                         query_service):
    store = GraphStore(settings)
    graph = store.graph("default")
    try:
        twice = await add(front, "A kestrel, a kestrel nest.")
        once = await add(front, "Harbour crane.")
        await run_workers(settings)
        # both words in one passage each: two kestrels beat one harbour
        assert await first_hit(front) == twice
        common = [await add(front, f"Kestrel sighting number {i}.") for i in range(5)]
        await run_workers(settings)
        assert await postings.term_sizes(graph, ["kestrel", "harbour"]) == [6, 1]
        # "kestrel" is now in six passages of seven: the rare "harbour" ranks first
        assert await first_hit(front) == once
        for memory_id in common:
            await ops.delete_memory(front, MemoryRef(memory_id=memory_id))
        await run_workers(settings)
        assert await postings.term_sizes(graph, ["kestrel", "harbour"]) == [1, 1]
        assert await first_hit(front) == twice
        rows = await run(graph, "MATCH (c:Chunk) RETURN c.text, c.words")
        assert rows and all(words == count_words(text) for text, words in rows)
    finally:
        await store.aclose()
