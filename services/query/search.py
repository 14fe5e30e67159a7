"""The read path: vector search with filters, one memory, and namespace stats. Read-only."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
import numpy as np
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from shared import cypher, metrics, tasks
from shared.embed import Embedder, to_params
from shared.errors import NotFound
from shared.graphstore import GraphStore, check_model, namespace_exists, run
from shared.messages import (
    MemoryRecord,
    MemoryRef,
    SearchHit,
    SearchRequest,
    SearchResponse,
    Stats,
    StatsRequest,
)
from shared.settings import Settings

log = logging.getLogger(__name__)
_decode_json = msgspec.json.Decoder().decode
MAX_CANDIDATES = 1000
QUERY_CACHE_TTL = 7 * 86400


def candidate_depth(request: SearchRequest) -> int:
    """HNSW over-fetch: memories still ingesting and filters drop candidates after the index."""
    factor = 20 if request.filters.active else 3
    return min(MAX_CANDIDATES, max(request.limit * factor, 30))


def filter_params(request: SearchRequest) -> dict[str, Any]:
    f = request.filters
    return {"tags": f.tags, "source": f.source, "after": f.after, "before": f.before}


async def search_memory(store: GraphStore, embedder: Embedder, redis: Redis,
                        request: SearchRequest) -> SearchResponse:
    started = time.perf_counter()
    empty = SearchResponse(namespace=request.namespace, query=request.query, results=[])
    dim = await embedder.dimension()
    if not await check_model(store, request.namespace, embedder.name, dim):
        return empty
    vector = await embed_query(embedder, redis, request.query)
    params = {**filter_params(request), "vector": to_params(vector[None, :])[0],
              "limit": request.limit}
    graph = store.graph(request.namespace)
    rows = await run(graph, cypher.SEARCH_VECTOR, {**params, "k": candidate_depth(request)},
                     read_only=True)
    metrics.SEARCH_CANDIDATES.labels("vector").observe(len(rows))
    if len(rows) < request.limit:
        # HNSW post-filtering can lose results a selective filter would keep: score exactly
        rows = await run(graph, cypher.SEARCH_EXACT, params, read_only=True)
        metrics.SEARCH_CANDIDATES.labels("exact").observe(len(rows))
    metrics.SEARCH_SECONDS.labels("vector").observe(time.perf_counter() - started)
    return msgspec.structs.replace(empty, results=[shape_hit(r) for r in rows])


async def embed_query(embedder: Embedder, redis: Redis, text: str) -> np.ndarray:
    """The query's vector, from the Redis cache (model + text hash) when it is there."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    key = f"zapomni:qemb:{embedder.name}:{digest}"
    try:
        cached = await redis.get(key)
    except (redis_errors.ConnectionError, redis_errors.TimeoutError):
        cached = None  # the cache is an optimisation: search works without Redis
    if cached:
        metrics.QUERY_CACHE.labels("hit").inc()
        return np.frombuffer(cached, dtype=np.float32)
    metrics.QUERY_CACHE.labels("miss").inc()
    vector = (await embedder.embed([text]))[0].astype(np.float32)
    with contextlib.suppress(redis_errors.ConnectionError, redis_errors.TimeoutError):
        await redis.set(key, vector.tobytes(), ex=QUERY_CACHE_TTL)
    return vector


def shape_hit(row: list[Any]) -> SearchHit:
    memory_id, chunk_id, text, distance, start, end, tags, source, metadata, created = row
    return SearchHit(
        memory_id=memory_id, chunk_id=chunk_id, text=text,
        score=round(max(0.0, 1.0 - float(distance)), 6),
        char_start=int(start), char_end=int(end), tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created),
    )


def iso_time(ts: float | None) -> str:
    return datetime.fromtimestamp(float(ts or 0), UTC).isoformat(timespec="seconds")


async def read_memory(store: GraphStore, ref: MemoryRef) -> MemoryRecord:
    rows = []
    if await namespace_exists(store, ref.namespace):
        rows = await run(store.graph(ref.namespace), cypher.GET_MEMORY, {"id": ref.memory_id},
                         read_only=True)
    if not rows:
        raise NotFound(f"memory {ref.memory_id} not found in namespace '{ref.namespace}'")
    memory_id, text, tags, source, metadata, created, chunk_count, ready = rows[0]
    return MemoryRecord(
        memory_id=memory_id, namespace=ref.namespace, text=text, tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created), chunk_count=int(chunk_count or 0),
        status="ready" if ready else "ingesting",
    )


async def read_stats(store: GraphStore, redis: Redis, settings: Settings,
                     request: StatsRequest) -> Stats:
    memories = ingesting = chunks = 0
    model, dim = "", 0
    if await namespace_exists(store, request.namespace):
        graph = store.graph(request.namespace)
        total, ingesting = (await run(graph, cypher.COUNT_MEMORIES, read_only=True))[0]
        chunks = (await run(graph, cypher.COUNT_CHUNKS, read_only=True))[0][0]
        memories = int(total or 0) - int(ingesting or 0)
        found = await run(graph, cypher.READ_MODEL, read_only=True)
        if found:
            model, dim = found[0][0], int(found[0][1])
    return Stats(
        namespace=request.namespace, memories=memories, chunks=int(chunks or 0),
        memories_ingesting=int(ingesting or 0),
        queue_depth=await tasks.queue_depth(redis, settings.queue_name),
        workers_alive=await tasks.workers_alive(redis),
        tasks=await tasks.task_counts(redis, request.namespace, settings.task_ttl_days * 86400),
        embedding_model=model, embedding_dim=dim,
    )
