"""The keyword pool chosen from postings cached in the query service
(services/query/postings.py) ranks as the pool summed in FalkorDB does, to the score; a
write or a delete is seen by the next search (the namespace's write stamp); the cache holds
no more postings than its capacity."""

from __future__ import annotations

import itertools

from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.query import postings
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store import cypher_search
from zapomni.shared.store.graphstore import GraphStore, run, run_cells

ANIMALS = ["heron", "otter", "badger", "kestrel", "stoat"]
PLACES = ["harbour", "meadow", "quarry", "orchard", "estuary", "harbour wall"]
QUERIES = ["heron harbour", "otter estuary at dusk", "badger", "kestrel over the quarry wall",
           "stoat meadow orchard"]


async def keyword(front, query: str) -> list[tuple[str, str, float]]:
    request = decode_search(query, 10, None, None, "keyword")
    response = await front.query.call("/v1/search", request, SearchResponse)
    return [(hit.memory_id, hit.chunk_id, hit.score) for hit in response.results]


async def add(front, text: str) -> str:
    return (await ops.add_memory(front, decode_add_memory(text, None, None))).memory_id


async def each_way(front, query: str) -> tuple[list, list, list]:
    """The ranking summed in FalkorDB, then from postings read now, then from the cache."""
    postings.CACHE.capacity = 0
    summed = await keyword(front, query)
    postings.CACHE.capacity = postings.CACHED_POSTINGS
    postings.CACHE.clear()
    return summed, await keyword(front, query), await keyword(front, query)


async def test_cached_postings_rank_as_falkordb_and_follow_writes(settings, front,
                                                                   query_service):
    for i, (animal, place) in enumerate(itertools.product(ANIMALS, PLACES)):
        await add(front, f"A {animal} was seen by the {place} ({'at dusk ' * (i % 3)}).")
    await run_workers(settings)
    try:
        for query in QUERIES:
            summed, read, cached = await each_way(front, query)
            assert summed and summed == read == cached
        assert 0 < postings.CACHE.held <= postings.CACHED_POSTINGS
        otter = await add(front, "An otter, otter and otter by the estuary.")
        await run_workers(settings)
        assert (await keyword(front, "otter estuary"))[0][0] == otter
        await ops.delete_memory(front, MemoryRef(memory_id=otter))
        await run_workers(settings)
        assert otter not in [hit[0] for hit in await keyword(front, "otter estuary")]
        postings.CACHE.capacity = 40  # terms of up to 10 postings are cached, no more held
        postings.CACHE.clear()
        for query in QUERIES:
            await keyword(front, query)
            assert postings.CACHE.held <= 40
    finally:
        postings.CACHE.capacity = postings.CACHED_POSTINGS
        postings.CACHE.clear()
    await rows_by_index(settings)


async def rows_by_index(settings) -> None:
    """The chosen chunks are found by their node ids; a plan that starts from every Memory
    for each of the 400 rows took 9 s at 100k chunks."""
    store = GraphStore(settings)
    try:
        plan = await store.graph("default").explain(cypher_search.KEYWORD_POOL_ROWS, {
            "nodes": [0], "pool": 1, "now": 0.0, "superseded": False})
        text = "\n".join(plan.plan)  # the plan's lines, as GRAPH.EXPLAIN gives them
        assert "Node By Label and ID Scan | (c:Chunk)" in text
        assert "Label Scan | (m:Memory)" not in text
    finally:
        await store.aclose()


async def test_cells_read_by_us_are_the_clients_values(settings):
    """run_cells (shared/store/falkordb_internals.py) reads a real reply as the client does: every
    scalar kind, arrays of them, nested."""
    store = GraphStore(settings)
    try:
        graph = store.graph("cells")
        await run(graph, "CREATE (:Probe)")  # a read needs the graph to exist
        query = ("RETURN null, 'tëxt \"q\"', 3, -7, 2.5, 1.0e-12, true, false, "
                 "[1, 'a', 2.5, null, [true, 'b']], []")
        ours = await run_cells(graph, query)
        theirs = await run(graph, query, read_only=True)
        assert ours == theirs == [[None, 'tëxt "q"', 3, -7, 2.5, 1.0e-12, True, False,
                                   [1, "a", 2.5, None, [True, "b"]], []]]
        assert [type(v) for v in ours[0][:8]] == [type(v) for v in theirs[0][:8]]
    finally:
        await store.aclose()
