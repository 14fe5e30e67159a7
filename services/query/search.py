"""The read path's search: gather candidates from each signal, fuse, filter, fold (then
services/query/hits.py shapes them).

Signals (``mode``): ``vector`` (HNSW over chunk embeddings, or an exact scan when filters
leave too few), ``keyword`` (FalkorDB full-text candidates re-scored with BM25), ``graph``
(entities named in the query and their neighbours: services/query/entities.py) and ``hybrid``
(vector and keyword, and graph for a question naming one or two rare entities: graph_joins;
fused by standardised score).
Read-only.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any

import msgspec
import numpy as np
from falkordb.asyncio.graph import AsyncGraph
from redis.asyncio import Redis

from zapomni.services.query.entities import (
    Found,
    Named,
    graph_signal,
    named_in,
    reasons,
    with_neighbours,
)
from zapomni.services.query.fusion import (
    Candidate,
    Context,
    collapse,
    fuse_scores,
    single,
)
from zapomni.services.query.hits import shape_results, why_empty
from zapomni.services.query.keyword import bm25, idf, stem, term_counts, terms
from zapomni.services.query.postings import keyword_pool
from zapomni.services.query.rank import AccessLog
from zapomni.services.query.timeline import asked_order, time_prior, time_terms
from zapomni.services.query.versions import inherit
from zapomni.services.query.when import read_time
from zapomni.shared import metrics
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.embed import Embedder, to_params
from zapomni.shared.embedding.vector_cache import VectorCache
from zapomni.shared.protocol.answers import (
    SearchResponse,
)
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_moves, cypher_search, postings
from zapomni.shared.store.graphstore import (
    GraphStore,
    SearchState,
    meta_pair,
    run,
    run_cells,
    search_state,
)
from zapomni.shared.text.words import count_words

log = logging.getLogger(__name__)
MAX_CANDIDATES = 1000
# a term in more chunks than this share does not choose the pool (it still counts in BM25):
# measured on 10k chunks, the final top 10 identical for 99.3% of 300 questions, p95 -25%
COMMON_TERM_SHARE = 0.1
QUERY_CACHE_TTL = 7 * 86400
QUERY_CACHE_MAX = 10_000  # question vectors kept (~18 MB at 384-d)
# the graph joins hybrid's fusion only for a question that names one or two rare entities
# (each in at most RARE_SHARE of the namespace's chunks, or RARE_FLOOR chunks in a small one):
# chosen on the dev sets of ./dev bench retrieval, hybrid with the graph against without,
# nDCG@10 / R@10: always joining gave HotpotQA -0.0103, LoCoMo R@10 -0.0051, MuSiQue +0.0220;
# this rule +0.0005, +0.0019, +0.0156; shares 0.004-0.01 and floors 1-3 within 0.0014
# (docs/benchmarks.md, "The graph read path")
RARE_SHARE = 0.005
RARE_FLOOR = 2
MAX_RARE = 2
CONTEXT_SEEDS = 10  # best candidates whose unfound neighbours join the candidates
# hybrid's fusion: standardised scores over each signal's best CANDIDATES, weighted per signal.
# At equal weights it beat reciprocal rank fusion on every set (SciFact nDCG@10 0.709 -> 0.723,
# MuSiQue 0.621 -> 0.665); graph 0.75 or 1.0 was no better (docs/benchmarks.md, "Retrieval
# quality")
WEIGHTS = {"vector": 1.0, "keyword": 1.0, "graph": 0.5}
CANDIDATES = 50  # candidates each signal brings to fusion
# share of a neighbouring turn's fused score a memory of the same thread gets (LoCoMo R@5 / R@10
# 0.588 / 0.672 -> 0.611 / 0.704 with it: docs/benchmarks.md, "Retrieval quality")
CONTEXT_WEIGHT = 0.5
# full-text candidates the keyword signal re-scores with BM25 (three times the results asked
# for when that is more): 100 instead of 200 moved SciFact's nDCG@10 0.6651 -> 0.6639 hybrid,
# 0.7162 -> 0.7175 keyword (docs/benchmarks.md, "The keyword pool")
KEYWORD_POOL = 100
Ranked = list[tuple[list[Any], float]]


def candidate_depth(request: SearchRequest) -> int:
    """How many candidates each signal brings to fusion and folding."""
    return min(MAX_CANDIDATES, max(request.limit * 3, CANDIDATES))


def hnsw_k(request: SearchRequest, depth: int) -> int:
    """HNSW over-fetch: filters and memories still ingesting drop candidates after the index."""
    return min(MAX_CANDIDATES, depth * (10 if request.filters.active else 2))


def meta_pairs(metadata: dict[str, Any] | None) -> list[str] | None:
    """Metadata equality filters in the form workers store them (see workers/store.py)."""
    if metadata is None:
        return None
    return [meta_pair(key, value) for key, value in sorted(metadata.items())]


def filter_params(request: SearchRequest) -> dict[str, Any]:
    f = request.filters
    return {"tags": f.tags, "tags_all": f.tags_all, "source": f.source,
            "source_prefix": f.source_prefix, "after": f.after, "before": f.before,
            "meta_kv": meta_pairs(f.metadata), **cypher_search.visible_params(f.include_superseded)}


async def search_memory(store: GraphStore, embedder: Embedder, redis: Redis,
                        settings: Settings, request: SearchRequest, *,
                        access: AccessLog | None = None) -> SearchResponse:
    """``access``: where to note which memories were returned (services/query/rank.py);
    None records nothing."""
    started = time.perf_counter()
    empty = SearchResponse(namespace=request.namespace, query=request.query, results=[],
                           mode=request.mode, rank=request.rank)
    state = await search_state(store, request.namespace, embedder.name,
                               await embedder.dimension())
    if not state.prop:
        return msgspec.structs.replace(
            empty, note=f"namespace '{request.namespace}' holds no memories yet")
    graph = store.graph(request.namespace)
    graph.vector_prop = state.prop
    params = {**filter_params(request), "depth": candidate_depth(request)}
    # older versions of updated memories are read too, for the current ones to inherit
    inheriting = state.versions and not request.filters.include_superseded
    params["superseded"] = params["superseded"] or inheriting
    weights = WEIGHTS
    total = max(1, state.chunks)  # idf's N, for the keyword and graph signals
    threaded = request.mode == "hybrid" and state.threads > 0
    when = read_time(request.query, request.as_of or time.time())
    ranked, named, found = await first_signals(graph, embedder, redis, weights, request,
                                               params, state, total,
                                               time_terms(request.query, when)[0])
    fused = fuse(ranked, weights) if request.mode == "hybrid" else []
    for signal, rows in ranked.items():
        metrics.SEARCH_CANDIDATES.labels(signal).observe(len(rows))
    if request.mode == "hybrid":
        candidates = fused
        if threaded:
            candidates = fuse(ranked, weights, await conversation_context(
                graph, candidates, params, CONTEXT_WEIGHT))
    else:
        candidates = single(request.mode, ranked[request.mode])
    if found is not None:
        explain(candidates, named, found)
    if inheriting:
        candidates = await inherit(graph, candidates, {**params, "superseded": False})
    kept = [c for c in collapse(candidates) if c.score >= request.min_score]
    kept = await time_prior(graph, kept, when, request.query)
    results = await shape_results(graph, kept, request,
                                  asked_order(when, request.query))
    metrics.SEARCH_SECONDS.labels(request.mode).observe(time.perf_counter() - started)
    note = await why_empty(graph, named) if request.mode == "graph" and not results else None
    if access is not None and results:
        access.record(request.namespace, [hit.memory_id for hit in results])
    return msgspec.structs.replace(empty, note=note, results=results)


async def first_signals(graph: AsyncGraph, embedder: Embedder, redis: Redis,
                        weights: dict[str, float], request: SearchRequest, params: dict[str, Any],
                        state: SearchState, total: int, timed: frozenset[str] = frozenset()
                        ) -> tuple[dict[str, Ranked], Named | None, Found | None]:
    """Every signal at once (each needs only the question): vector, keyword and graph.
    ``state``: what search_state read of the namespace; ``total``: its chunks (at least 1);
    ``timed``: the question's words that are its time, not matched as words."""
    jobs: dict[str, Any] = {}
    if request.mode in ("hybrid", "vector"):
        jobs["vector"] = vector_signal(graph, embedder, redis, request, params)
    graphed = request.mode == "graph" or (request.mode == "hybrid" and weights["graph"] > 0)
    if request.mode in ("hybrid", "keyword"):
        jobs["keyword"] = keyword_signal(graph, request, params, total,
                                         KEYWORD_POOL, timed)
    if graphed:
        jobs["graph"] = graph_part(graph, request, params, total, state.code)
    done = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
    named, found = done.pop("graph", (None, None))
    if found is not None:
        done["graph"] = found.ranked
    return done, named, found


async def graph_part(graph: AsyncGraph, request: SearchRequest, params: dict[str, Any],
                     total: int, code: bool) -> tuple[Named, Found | None]:
    """The graph signal: the entities the question names, then (in hybrid only where
    ``graph_joins``) the passages that mention them or their neighbours. Five reads one
    after another, beside the vector and keyword signals."""
    named = await named_in(graph, request.query, code)
    if request.mode == "hybrid" and not graph_joins(named, total):
        return named, None
    named = await with_neighbours(graph, named)
    return named, await graph_signal(graph, named, params, total)


def graph_joins(named: Named, total: int) -> bool:
    """Whether the graph signal joins hybrid's fusion: the question names one or two rare
    entities. One that names none is answered by words and meaning; one that names many
    already says in words what the graph would add (measured: see RARE_SHARE)."""
    most = max(RARE_FLOOR, RARE_SHARE * total)
    rare = [e for e in named.direct if 0 < named.mentions[e] <= most]
    return 1 <= len(rare) <= MAX_RARE


def explain(candidates: list[Candidate], named: Named, found: Found) -> None:
    """``why["graph"]`` of each candidate the graph signal found names the entities it was
    found through (services/query/entities.py, reasons)."""
    for candidate in candidates:
        match = candidate.why.get("graph")
        if match is not None and candidate.row[1] in found.matched:
            candidate.why["graph"] = msgspec.structs.replace(
                match, **reasons(named, found.matched[candidate.row[1]]))


def fuse(ranked: dict[str, Ranked], weights: dict[str, float],
         context: Context | None = None) -> list[Candidate]:
    # a signal that found nothing (no entity named, only stop words) has no say
    ranked = {signal: rows for signal, rows in ranked.items() if rows and weights[signal] > 0}
    return fuse_scores(ranked, weights, CANDIDATES, context)


async def conversation_context(graph: AsyncGraph, candidates: list[Candidate],
                               params: dict[str, Any], weight: float) -> Context:
    """Memories added one after another to one thread (a conversation's turns) are read
    together: an answer ("Yes, the one about transgender stories") rarely repeats the
    words of the question, the turn before it does. The neighbours of every candidate, and
    the rows of those next to the best ``CONTEXT_SEEDS`` that no signal found."""
    memory_ids = sorted({c.memory_id for c in candidates})
    if not memory_ids:
        return Context({}, [], weight)
    rows = await run(graph, cypher_search.CONTEXT_LINKS, {"ids": memory_ids}, read_only=True)
    links: dict[str, list[str]] = {}
    before: dict[str, str] = {}
    for memory_id, neighbour, follows in rows:
        links.setdefault(memory_id, []).append(neighbour)
        if not follows:
            before[memory_id] = neighbour
    found = set(memory_ids)
    wanted: dict[str, bool] = {}  # neighbour -> it came before (so its last chunk is nearest)
    for candidate in collapse(candidates)[:CONTEXT_SEEDS]:
        for neighbour in links.get(candidate.memory_id, []):
            if neighbour not in found:
                wanted.setdefault(neighbour, neighbour == before.get(candidate.memory_id))
    if not wanted:
        return Context(links, [], weight)
    extra = await run(graph, cypher_search.CONTEXT_HITS,
                      {**params, "wanted": [[m, last] for m, last in sorted(wanted.items())]},
                      read_only=True)
    return Context(links, extra, weight)


async def vector_signal(graph: AsyncGraph, embedder: Embedder, redis: Redis,
                        request: SearchRequest, params: dict[str, Any]) -> Ranked:
    vector = await embed_query(embedder, redis, request.query)
    params = {**params, "vector": to_params(vector[None, :])[0]}
    prop = getattr(graph, "vector_prop", "embedding")
    rows = await run_cells(graph, cypher_moves.SEARCH_VECTOR[prop], {**params, "k": hnsw_k(
        request, params["depth"])})
    if len(rows) < min(params["depth"], request.limit * 2):
        # HNSW post-filtering can lose results a selective filter would keep: score exactly
        rows = await run_cells(graph, cypher_moves.SEARCH_EXACT[prop], params)
    return [(row, max(0.0, 1.0 - float(row[3]))) for row in rows]


async def keyword_signal(graph: AsyncGraph, request: SearchRequest, params: dict[str, Any],
                         total: int, pool: int, timed: frozenset[str] = frozenset()) -> Ranked:
    """Full-text candidates by BM25 over the query's terms, then re-scored with BM25 over the
    pool's own average length. A term's document frequency is how many chunks of the
    namespace hold its stem, with or without filters (the size of its postings:
    shared/store/postings.py). ``pool``: the candidates re-scored (at least ``depth``). The
    unfiltered pool is summed from the postings (services/query/postings.py); a filtered one
    is summed in FalkorDB, and the unfiltered one gives it BM25's average length. ``timed``:
    words of the question's time window, left out (services/query/timeline.py, time_terms)."""
    words = [word for word in terms(request.query) if word not in timed]
    if not words:
        return []  # only stop words or punctuation: nothing to match, not an error
    stems = {word: stem(word) for word in words}
    unique = list(dict.fromkeys(stems.values()))
    sizes = dict(zip(unique, await postings.term_sizes(graph, unique), strict=True))
    df = {word: min(sizes[stems[word]], total) for word in words}
    rarity = {w: idf(total, df[w]) for w in words}
    weighted = [[w, rarity[w]] for w in words if df[w]]
    if not weighted:
        return []
    pool = max(params["depth"], pool)
    common = max(COMMON_TERM_SHARE * total, 2 * pool)  # fewer postings are cheap to sum
    chosen = pool_terms(weighted, df, common)
    first = {}  # the postings are a stem's: the first word of each
    for word, weight in chosen:
        first.setdefault(stems[word], [word, weight])
    everywhere = keyword_pool(graph, list(first.values()), pool, params)
    if not request.filters.active:
        rows = await everywhere
        return rescore(rows, rows, rarity)[:params["depth"]]
    unfiltered, rows = await asyncio.gather(everywhere, run(
        graph, cypher_search.KEYWORD_POOL, {**params, "weighted": chosen, "pool": pool},
        read_only=True))
    return rescore(rows, unfiltered, rarity)[:params["depth"]]


def rescore(rows: list[list[Any]], unfiltered: list[list[Any]],
            rarity: dict[str, float]) -> Ranked:
    """BM25 over the pool: term frequency saturates and long chunks are normalised, which
    FalkorDB's score does not do. The average length is the unfiltered pool's and idf the
    namespace's, so a filter only removes passages: it never changes one's score. A chunk's
    length is the word count stored at ingest (row[7]; counted here for older chunks)."""
    weights = {stem(w): weight for w, weight in rarity.items()}
    stems = frozenset(weights)
    lengths = {row[1]: int(row[7]) if row[7] is not None else count_words(row[2])
               for row in (*unfiltered, *rows)}
    avgdl = statistics.fmean(lengths[row[1]] for row in unfiltered or rows) if rows else 1.0
    counts = term_counts([row[2] for row in rows], stems)
    return sorted(((row[:6], bm25(found, lengths[row[1]], weights, avgdl, matched=row[6]))
                   for row, found in zip(rows, counts, strict=True)),
                  key=lambda item: (-item[1], item[0][1]))


def pool_terms(weighted: list[list[Any]], df: dict[str, int], common: float
               ) -> list[list[Any]]:
    """The terms whose postings choose the pool: not those in more than ``common`` chunks,
    or the rarest term alone if all are. BM25 over the pool still counts every term; a common
    word only stops bringing in thousands of chunks that match nothing else (FalkorDB sums
    ~5 µs per posting)."""
    rare = [t for t in weighted if df[t[0]] <= common]
    if not rare:
        return [max(weighted, key=lambda t: t[1])]
    return rare


async def embed_query(embedder: Embedder, redis: Redis, text: str) -> np.ndarray:
    """The query's vector, from the Redis cache (model + text hash) when it is there."""
    cache = VectorCache("zapomni:qemb", embedder.name, QUERY_CACHE_TTL, QUERY_CACHE_MAX)
    cached = (await vector_cache.read(redis, cache, [text]))[0]
    if cached:
        metrics.QUERY_CACHE.labels("hit").inc()
        return np.frombuffer(cached, dtype=np.float32)
    metrics.QUERY_CACHE.labels("miss").inc()
    vector = (await embedder.embed([text]))[0].astype(np.float32)
    await vector_cache.write(redis, cache, [text], vector[None, :])
    return vector
