"""The keyword pool chosen from each term's best postings (services/query/postings.py: read
best score first, as deep as the pool needs, with probes) is the exhaustive sum's, computed
in FalkorDB over every posting, to the order and the terms matched (the scores to the 15
digits FalkorDB sends); the keyword ranking is
the same however shallow the first read; a write or a delete is seen by the next search (the
namespace's write stamp); the cache holds no more postings than its capacity."""

from __future__ import annotations

import itertools

import pytest

from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.query import postings
from zapomni.services.query.keyword import idf
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store import cypher_search
from zapomni.shared.store.graphstore import GraphStore, run, run_cells

ANIMALS = ["heron", "otter", "badger", "kestrel", "stoat"]
PLACES = ["harbour", "meadow", "quarry", "orchard", "estuary", "harbour wall"]
QUERIES = ["heron harbour", "otter estuary at dusk", "badger", "kestrel over the quarry wall",
           "stoat meadow orchard", "harbour meadow dusk wall"]
# the pool summed over every posting in FalkorDB, as the keyword signal's pool query did
# before the threshold algorithm: the oracle here
EXHAUSTIVE = (
    "UNWIND $weighted AS t CALL db.idx.fulltext.queryNodes('Chunk', t[0]) "
    "YIELD node AS c, score WITH c, sum(t[1] * score) AS score, collect(t[0]) AS matched "
    "ORDER BY score DESC, c.id ASC LIMIT $over RETURN c.id, score, matched"
)


async def keyword(front, query: str) -> list[tuple[str, str, float]]:
    request = decode_search(query, 10, None, None, "keyword")
    response = await front.query.call("/v1/search", request, SearchResponse)
    return [(hit.memory_id, hit.chunk_id, hit.score) for hit in response.results]


async def add(front, text: str) -> str:
    return (await ops.add_memory(front, decode_add_memory(text, None, None))).memory_id


async def pools_agree(settings, over: int) -> None:
    """Each query's pool from the best postings, first read 2 deep (so read deeper and
    probed), is FalkorDB's exhaustive sum's."""
    store = GraphStore(settings)
    graph = store.graph("default")
    try:
        total = (await run(graph, cypher_search.COUNT_CHUNKS, read_only=True))[0][0]
        for query in QUERIES:
            words = [w for w in query.split() if w not in ("at", "the", "over")]
            df = dict(await run(graph, cypher_search.KEYWORD_DF_ALL, {"terms": words},
                                read_only=True))
            weighted = [[w, idf(total, df[w])] for w in words if df.get(w)]
            postings.CACHE.clear()
            chosen = await postings.keyword_pool(graph, "default", "now", weighted, df, over)
            expected = await run_cells(graph, EXHAUSTIVE, {"weighted": weighted, "over": over})
            assert [[cid, matched] for cid, _, _, matched in chosen] == [
                [cid, matched] for cid, _, matched in expected]
            # FalkorDB sends a double in 15 significant digits: the sums here are of those
            assert [score for _, _, score, _ in chosen] == pytest.approx(
                [score for _, score, _ in expected], rel=1e-12)
    finally:
        await store.aclose()


async def test_best_postings_rank_as_every_posting_and_follow_writes(settings, front,
                                                                     query_service):
    for i, (animal, place) in enumerate(itertools.product(ANIMALS, PLACES)):
        await add(front, f"A {animal} was seen by the {place} ({'at dusk ' * (i % 3)}).")
    for i in range(12):  # scores that differ: the term's share of a chunk's words
        await add(front, f"The harbour{' harbour' * (i % 4)} wall by the meadow, {i} "
                         f"{'stones ' * (i % 5)}and a heron.")
    await run_workers(settings)
    postings.FIRST_READ = 2
    try:
        for over in (1, 5, 20):
            await pools_agree(settings, over)
        for query in QUERIES:
            postings.CACHE.clear()
            shallow = await keyword(front, query)
            cached = await keyword(front, query)
            postings.FIRST_READ, deep = 10_000, postings.FIRST_READ
            postings.CACHE.clear()
            whole = await keyword(front, query)  # every list read whole at once: the sum
            postings.FIRST_READ = deep
            assert whole and whole == shallow == cached
        assert 0 < postings.CACHE.held <= postings.CACHED_BYTES
        otter = await add(front, "An otter, otter and otter by the estuary.")
        await run_workers(settings)
        assert (await keyword(front, "otter estuary"))[0][0] == otter
        await ops.delete_memory(front, MemoryRef(memory_id=otter))
        await run_workers(settings)
        assert otter not in [hit[0] for hit in await keyword(front, "otter estuary")]
        postings.CACHE.capacity = 40 * postings.ROW_BYTES  # a few terms' prefixes, no more
        postings.CACHE.clear()
        for query in QUERIES:
            await keyword(front, query)
            assert postings.CACHE.held <= 40 * postings.ROW_BYTES
    finally:
        postings.FIRST_READ = 1_000
        postings.CACHE.capacity = postings.CACHED_BYTES
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
