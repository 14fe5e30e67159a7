"""Hybrid retrieval through the real query service: modes, hostile queries, min_score,
folding, "why", filters on tags and metadata, and the query-embedding cache."""

from __future__ import annotations

import pytest

from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.query import hits as search_module
from zapomni.shared.protocol.answers import MemoryRecord, SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory, decode_search

NOTES = [
    ("The invoice XJ-4471 from Nordwind GmbH is due on March 3.",
     {"tags": ["finance", "due"], "source": "mail", "vendor": "nordwind", "amount": 1200}),
    ("Our cat Miso hides under the sofa whenever thunderstorms roll in.",
     {"tags": ["home"], "source": "diary"}),
    ("Quarterly revenue grew because the subscription price went up.",
     {"tags": ["finance"], "source": "report", "vendor": "internal"}),
    ("Felines often seek small dark shelters when they are frightened by loud noise.",
     {"tags": ["pets", "home"], "source": "book"}),
]


async def search(front, query, **options):
    request = decode_search(query, options.pop("limit", 10), options.pop("filters", None),
                            None, options.pop("mode", None), options.pop("min_score", None))
    return (await front.query.call("/v1/search", request, SearchResponse)).results


@pytest.fixture
async def notes(settings, front, query_service):
    receipts = [await ops.add_memory(front, decode_add_memory(text, meta, None))
                for text, meta in NOTES]
    await run_workers(settings)
    return [r.memory_id for r in receipts]


async def test_each_mode_finds_what_it_is_good_at(front, notes):
    exact = await search(front, "XJ-4471", mode="keyword")
    assert [h.memory_id for h in exact] == [notes[0]]
    assert set(exact[0].why) == {"keyword"} and exact[0].why["keyword"].rank == 1
    meaning = await search(front, "where does a scared kitty go?", mode="vector", limit=2)
    assert {h.memory_id for h in meaning} == {notes[1], notes[3]}
    assert all(set(h.why) == {"vector"} and 0 < h.score <= 1 for h in meaning)
    hybrid = await search(front, "invoice XJ-4471 payment deadline")
    assert hybrid[0].memory_id == notes[0]
    assert set(hybrid[0].why) == {"vector", "keyword"}
    # first of both signals, far ahead of the rest: well above the average candidate (0.5)
    assert hybrid[0].score > 0.8 and all(h.score < 0.5 for h in hybrid[1:])


@pytest.mark.parametrize("hostile", [
    '@text:{XJ} | "4471"', "XJ-4471*", "-(invoice)", "invoice OR 1=1; MATCH (n) DELETE n",
    "%invoice% ~Nordwind", "{$where: 1}", "'; DROP GRAPH zapomni; --", "\\\\ \" ' ` ",
])
async def test_query_syntax_is_never_interpreted(front, notes, hostile):
    for mode in ("keyword", "hybrid"):
        results = await search(front, hostile, mode=mode)
        assert all(h.memory_id in notes for h in results)
    assert len(await search(front, "invoice", mode="keyword")) == 1  # the graph is intact


async def test_stop_words_only_is_a_clean_empty_result(front, notes):
    assert await search(front, "what is the, and of?!", mode="keyword") == []
    assert len(await search(front, "what is the, and of?!", mode="hybrid")) == 4  # vector


async def test_min_score_drops_weak_results(front, notes):
    everything = await search(front, "cat hiding from thunder", mode="vector")
    strong = await search(front, "cat hiding from thunder", mode="vector", min_score=0.4)
    assert len(everything) == 4 and 0 < len(strong) < 4
    assert all(h.score >= 0.4 for h in strong)


async def test_filters_on_tags_and_metadata(front, notes):
    both = await search(front, "money", filters={"tags_all": ["finance", "due"]})
    assert [h.memory_id for h in both] == [notes[0]]
    vendor = await search(front, "money", filters={"metadata": {"vendor": "internal"}})
    assert [h.memory_id for h in vendor] == [notes[2]]
    amount = await search(front, "money", filters={"metadata": {"amount": 1200}})
    assert [h.memory_id for h in amount] == [notes[0]]
    assert await search(front, "money", filters={"metadata": {"amount": "1200"}}) == []


async def test_overlapping_chunks_fold_into_one_result(falkordb_url, aredis, monkeypatch):
    from tests.conftest import make_settings
    from tests.support.servers import ThreadedServer
    from zapomni.services.mcp.front import Front

    # no graph built: the graph signal finds nothing and hybrid folds one list twice
    # 128 tokens: an overlap of 16, a sentence here, so neighbouring chunks share one
    settings = make_settings(falkordb_url, chunk_tokens=128, graph_auto=False)
    monkeypatch.setattr(search_module, "MAX_PER_MEMORY", 0)  # every chunk a result or folded
    text = " ".join(f"Harbour log {i}: the crane lifted container {i} onto the blue ship."
                    for i in range(40))
    from zapomni.services.query.app import build_app

    port = int(settings.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(settings), port=port):
        front = Front(settings)
        try:
            added = await ops.add_memory(front, decode_add_memory(text, None, None))
            await run_workers(settings)
            chunks = (await front.query.call("/v1/memory", MemoryRef(
                memory_id=added.memory_id), MemoryRecord)).chunk_count
            hits = await search(front, "crane container blue ship harbour", limit=20)
        finally:
            await front.aclose()
    spans = sorted((h.char_start, h.char_end) for h in hits)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # no overlaps
    # every chunk is a candidate (the vector signal returns them all): each one is either a
    # result or folded into exactly one, counted once however often search folds the list
    assert len(hits) < 20 and chunks > len(hits)
    assert sum(h.also_matched for h in hits) == chunks - len(hits)


CRANES = " ".join(f"Harbour log {i}: the crane lifted container {i} onto the blue ship."
                  for i in range(40))
SMALL = ["The harbour crane broke down while loading a ship.",
         "A container ship waited a day at the harbour for its crane.",
         "Blue cranes load containers onto ships in the port.",
         "The ship's containers were lifted ashore by two cranes."]


async def search_with(settings, query: str, limit: int = 10):
    from tests.support.servers import ThreadedServer
    from zapomni.services.mcp.front import Front
    from zapomni.services.query.app import build_app

    port = int(settings.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(settings), port=port):
        front = Front(settings)
        try:
            return await search(front, query, limit=limit)
        finally:
            await front.aclose()


async def test_one_big_memory_holds_at_most_three_results_and_lists_the_rest(settings,
                                                                             falkordb_url,
                                                                             monkeypatch):
    from tests.conftest import make_settings
    from zapomni.services.mcp.front import Front

    capped = make_settings(falkordb_url, chunk_tokens=48, graph_auto=False)
    front = Front(capped)
    try:
        big = (await ops.add_memory(front, decode_add_memory(CRANES, None, None))).memory_id
        small = {(await ops.add_memory(front, decode_add_memory(t, None, None))).memory_id
                 for t in SMALL}
        await run_workers(capped)
    finally:
        await front.aclose()
    query = "crane lifting a container onto the blue ship in the harbour"
    with monkeypatch.context() as uncapping:
        uncapping.setattr(search_module, "MAX_PER_MEMORY", 0)
        uncapped = await search_with(make_settings(falkordb_url), query)
    assert sum(h.memory_id == big for h in uncapped) > 3  # without the cap it fills the page
    hits = await search_with(capped, query)
    held = [h for h in hits if h.memory_id == big]
    assert len(held) == 3 and {h.memory_id for h in hits} == small | {big}
    assert len(hits) == 7  # every memory found; nothing else to show
    listed = held[0].more  # the big memory's further matches, under its best result
    assert listed and all(not h.more for h in hits if h is not held[0])
    assert [m.score for m in listed] == sorted((m.score for m in listed), reverse=True)
    assert max(m.score for m in listed) <= min(h.score for h in held)
    shown = {h.chunk_id for h in hits}
    for match in listed:
        assert match.chunk_id not in shown and match.chunk_id.startswith(big)
        assert "container" in CRANES[match.char_start:match.char_end]


async def test_repeated_queries_hit_the_embedding_cache(front, notes, aredis):
    await search(front, "a question asked twice", mode="vector")
    await search(front, "a question asked twice", mode="vector")
    assert len(await aredis.keys("zapomni:qemb:onnx:all-MiniLM-L6-v2-int8:*")) == 1




async def test_a_filter_narrows_keyword_results_and_keeps_their_scores(settings, front,
                                                                     query_service):
    """idf is the namespace's and the average length the unfiltered pool's, so a filter only
    removes passages; and a passage the index matched through its stemmer ("configured" finds
    "configuration") scores above 0."""
    texts = [("The configuration of the server lives in one file.", {"tags": ["cfg"]}),
             ("The server was configured yesterday by the admins.", None),
             ("Running servers need libraries.", {"tags": ["run"]}),
             ("She runs the library and the servers.", None)]
    ids = [(await ops.add_memory(front, decode_add_memory(text, meta, None))).memory_id
           for text, meta in texts]
    await run_workers(settings)
    for query, tag, expected in (("configured", "cfg", 0), ("configuring servers", "cfg", 0),
                                 ("running library", "run", 2)):
        plain = {h.chunk_id: h.score for h in await search(front, query, mode="keyword")}
        tagged = await search(front, query, mode="keyword", filters={"tags": [tag]})
        assert [h.memory_id for h in tagged] == [ids[expected]], query
        assert len(plain) > 1 and all(score > 0 for score in plain.values()), (query, plain)
        assert [h.score for h in tagged] == [plain[tagged[0].chunk_id]], query


async def test_keyword_counts_every_form_the_index_stems_alike(settings, front,
                                                                 query_service):
    """The keyword signal's BM25 stems as FalkorDB's full-text index does (Snowball
    English): for "configured", three uses of "configuration" outweigh one "configured"
    (a light suffix stripper counted "configuration" once, as matched, and ranked the
    shorter chunk first)."""
    many = await ops.add_memory(front, decode_add_memory(
        "The configuration file holds the configuration and the configuration wins.",
        None, None))
    once = await ops.add_memory(front, decode_add_memory(
        "She configured the router.", None, None))
    await run_workers(settings)
    hits = await search(front, "configured", mode="keyword")
    assert [h.memory_id for h in hits] == [many.memory_id, once.memory_id]
