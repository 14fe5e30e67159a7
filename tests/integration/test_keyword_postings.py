"""The keyword pool from the postings the workers keep (shared/store/postings.py, summed in
services/query/postings.py) is BM25 over every live chunk, computed here from the stored texts:
the same chunks in the same order with the same scores; a job that writes its chunks again,
or a delete cut short and run again, counts nothing twice; a deleted chunk is no longer
found nor counted; a version 4 namespace gets its postings from the migration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.support.waiting import eventually
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.query import postings as pool
from zapomni.services.query.keyword import K1, B, idf
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store import cypher_schema, cypher_search, migrate, postings
from zapomni.shared.store.graphstore import GraphStore, indexes_building, run, run_cells
from zapomni.shared.store.migrate import migrate_namespace
from zapomni.shared.text.words import stem

ANIMALS = ["heron", "otter", "badger", "kestrel", "stoat"]
PLACES = ["harbour", "meadow", "quarry", "orchard", "estuary", "harbour wall"]
QUERIES = ["heron harbour", "otter estuary dusk", "badger", "kestrel quarry wall",
           "stoat meadow orchard", "harbour meadow dusk wall", "walls harbours"]
VISIBLE = {"now": 0.0, "superseded": False}


async def keyword(front, query: str) -> list[tuple[str, str, float]]:
    request = decode_search(query, 10, None, None, "keyword")
    response = await front.query.call("/v1/search", request, SearchResponse)
    return [(hit.memory_id, hit.chunk_id, hit.score) for hit in response.results]


async def add(front, text: str) -> str:
    return (await ops.add_memory(front, decode_add_memory(text, None, None))).memory_id


async def brute_force(graph, words: list[str], over: int) -> list[tuple[str, float]]:
    """BM25 of every stored chunk over ``words`` (their stems), best first, ties by the
    chunk's number (the order the postings were written in)."""
    texts = dict(await run(graph, "MATCH (c:Chunk) RETURN c.id, c.text", read_only=True))
    counted = {cid: postings.counts_of([(cid, text)])[0] for cid, text in texts.items()}
    total = len(texts)
    average = sum(length for _, _, length in counted.values()) / total
    stems = list(dict.fromkeys(stem(w) for w in words))
    df = {s: sum(1 for _, counts, _ in counted.values() if s in counts) for s in stems}
    scores = {}
    for cid, (_, counts, length) in counted.items():
        score = 0.0
        for s in stems:
            tf = counts.get(s, 0)
            if tf:
                score += idf(total, df[s]) * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length
                                                                         / average))
        if score:
            scores[cid] = score
    numbers = {cid: int(seq) for cid, seq in zip(scores, await graph.raw.hmget(
        postings.prefix(graph.key) + "seqof", list(scores)), strict=True)}
    return sorted(scores.items(), key=lambda item: (-item[1], numbers[item[0]]))[:over]


async def pools_agree(graph, over: int) -> None:
    total = (await run(graph, cypher_search.COUNT_CHUNKS, read_only=True))[0][0]
    for query in QUERIES:
        words = query.split()
        stems = list(dict.fromkeys(stem(w) for w in words))
        sizes = dict(zip(stems, await postings.term_sizes(graph, stems), strict=True))
        weighted = [[w, idf(total, sizes[stem(w)])] for w in words if sizes[stem(w)]]
        first = {}
        for word, weight in weighted:
            first.setdefault(stem(word), [word, weight])
        chosen = await pool.keyword_pool(graph, list(first.values()), over, VISIBLE)
        expected = await brute_force(graph, words, over)
        assert [row[1] for row in chosen] == [cid for cid, _ in expected]
        assert [row[3] for row in chosen] == pytest.approx([s for _, s in expected], rel=1e-9)


async def sizes(graph) -> dict[str, int]:
    stems = sorted({stem(w) for q in QUERIES for w in q.split()})
    return dict(zip(stems, await postings.term_sizes(graph, stems), strict=True))


async def test_the_pool_is_bm25_over_every_chunk_and_follows_writes(settings, front,
                                                                   query_service):
    for i, (animal, place) in enumerate(itertools.product(ANIMALS, PLACES)):
        await add(front, f"A {animal} was seen by the {place} ({'at dusk ' * (i % 3)}).")
    for i in range(12):  # counts and lengths that differ
        await add(front, f"The harbour{' harbour' * (i % 4)} wall by the meadow, {i} "
                         f"{'stones ' * (i % 5)}and a heron.")
    await run_workers(settings)
    store = GraphStore(settings)
    graph = store.graph("default")
    try:
        for over in (1, 5, 20, 100):
            await pools_agree(graph, over)
        counted = await sizes(graph)
        assert counted[stem("harbour")] == 2 * 5 + 12  # two places of five animals, and 12
        # a job that writes its chunks again appends the same postings: nothing counts twice
        rows = await run(graph, "MATCH (c:Chunk) RETURN c.id, c.text", read_only=True)
        await postings.index_written(graph, postings.counts_of(rows))
        assert await sizes(graph) == counted
        await pools_agree(graph, 20)
        # a delete forgets a chunk's counts once, however often it runs
        otter = await add(front, "An otter, otter and otter by the estuary.")
        await run_workers(settings)
        assert (await keyword(front, "otter estuary"))[0][0] == otter
        assert (await sizes(graph))[stem("otter")] == counted[stem("otter")] + 1
        chunk = await run(graph, "MATCH (c:Chunk {memory_id: $id}) RETURN c.id, c.text",
                          {"id": otter}, read_only=True)
        number = int(await graph.raw.hget(postings.prefix(graph.key) + "seqof", chunk[0][0]))
        await postings.forget(graph, [tuple(row) for row in chunk])  # a delete cut short
        assert await graph.raw.getbit(postings.prefix(graph.key) + "dead", number) == 1
        await ops.delete_memory(front, MemoryRef(memory_id=otter))
        await run_workers(settings)
        assert await sizes(graph) == counted
        assert otter not in [hit[0] for hit in await keyword(front, "otter estuary")]
        await pools_agree(graph, 20)
    finally:
        await store.aclose()


async def test_words_beyond_ascii_are_counted_found_and_forgotten(settings, front,
                                                                 query_service):
    """A chunk's stems reach the counting script as one space-joined argument, split again in
    Lua: words of other scripts and accents count as the same stems the search asks for."""
    words = ["кошка", "окне", "café", "naïve", "東京タワー", "straße"]
    memory = await add(front, "Запомни: " + " ".join(words) + ". The cat sleeps.")
    await run_workers(settings)
    store = GraphStore(settings)
    graph = store.graph("default")
    try:
        stems = [stem(w) for w in words]
        assert await postings.term_sizes(graph, stems) == [1] * len(words)
        for word in words:
            assert [hit[0] for hit in await keyword(front, word)] == [memory], word
        await ops.delete_memory(front, MemoryRef(memory_id=memory))
        await run_workers(settings)
        assert await postings.term_sizes(graph, stems) == [0] * len(words)
        assert await keyword(front, "кошка") == []
    finally:
        await store.aclose()


async def test_a_namespace_of_version_4_gets_its_postings(settings, front, query_service):
    """The migration numbers every chunk written before (a page of node ids at a time, from a
    cursor), after which search ranks as on a namespace written with postings."""
    for i, (animal, place) in enumerate(itertools.product(ANIMALS, PLACES)):
        await add(front, f"A {animal} was seen by the {place} ({'at dusk ' * (i % 3)}).")
    await run_workers(settings)
    store = GraphStore(settings)
    graph = store.graph("default")
    try:
        before = {q: await keyword(front, q) for q in QUERIES}
        counted = await sizes(graph)
        await graph.raw.delete(*[key async for key in graph.raw.scan_iter(
            match=postings.prefix(graph.key) + "*")])
        await run(graph, cypher_schema.WRITE_SCHEMA, {"version": 4})
        assert await keyword(front, "heron harbour") == []  # no postings: no keyword hits
        postings.PAGE_IDS, page = 7, postings.PAGE_IDS  # several pages
        try:
            assert await migrate_namespace(store, "default") >= 30
        finally:
            postings.PAGE_IDS = page
        assert await migrate.schema_version(store, "default") == migrate.SCHEMA_VERSION
        assert await sizes(graph) == counted
        assert {q: await keyword(front, q) for q in QUERIES} == before
        assert await migrate_namespace(store, "default") == 0  # current: nothing to do
    finally:
        await store.aclose()


async def test_pool_rows_are_read_by_the_chunk_index(settings):
    """The chosen chunks are found by id through the index, not by scanning."""
    store = GraphStore(settings)
    try:
        graph = store.graph("plan")
        for query in cypher_schema.SCHEMA:
            await graph.query(query)
        # an index is built after its CREATE returns; until then the plan scans the label
        await eventually(lambda: indexes_building(graph), lambda building: not building,
                         "the new graph's indexes to be usable")
        plan = await graph.explain(cypher_search.KEYWORD_POOL_ROWS, {"ids": ["x"], **VISIBLE})
        text = "\n".join(plan.plan)
        assert "Node By Index Scan | (c:Chunk)" in text, text
        assert "Label Scan" not in text, text
    finally:
        await store.aclose()


def test_scores_of_a_term_read_twice_count_once():
    """A chunk numbered twice in a term's postings (a job that ran twice) adds once; a dead
    number adds nothing."""
    records = np.array([(3, 2, 10), (5, 1, 10), (3, 2, 10)], postings.RECORD)
    scored = pool.score([2.0], [records], 10.0)
    once = pool.score([2.0], [records[:2]], 10.0)
    assert scored.seqs.tolist() == once.seqs.tolist() == [3, 5]
    assert scored.scores.tolist() == once.scores.tolist()
    assert math.isclose(scored.scores[0], 2.0 * 2 * (K1 + 1) / (2 + K1))
    dead = np.zeros(4, bool)
    dead[3] = True  # number 3 deleted: out of the sums; 5 is past the bitmap, alive
    assert pool.score([2.0], [records], 10.0, dead).seqs.tolist() == [5]


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
