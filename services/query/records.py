"""Reads that are not searches: one memory, and a namespace's stats. Read-only."""

from __future__ import annotations

import time

import msgspec
from redis.asyncio import Redis

from zapomni.services.query.hits import ingesting
from zapomni.services.query.versions import read_versions
from zapomni.shared.protocol.answers import MemoryRecord, Stats
from zapomni.shared.protocol.api import MemoryRef, StatsRequest
from zapomni.shared.protocol.errors import NotFound
from zapomni.shared.protocol.times import iso_time
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_graph, cypher_schema, cypher_search
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run
from zapomni.shared.tasks import heartbeat, tasks

_decode_json = msgspec.json.Decoder().decode


async def read_memory(store: GraphStore, ref: MemoryRef) -> MemoryRecord:
    rows = []
    if await namespace_exists(store, ref.namespace):
        rows = await run(store.graph(ref.namespace), cypher_search.GET_MEMORY,
                         {"id": ref.memory_id}, read_only=True)
    if not rows:
        raise NotFound(f"memory_id: {ref.memory_id} not found in namespace "
                       f"'{ref.namespace}'")
    memory_id, text, tags, source, metadata, created, chunk_count, ready, expires, task_id, \
        landed, occurred = rows[0]
    superseded_by, versions = await read_versions(store.graph(ref.namespace), memory_id)
    return MemoryRecord(
        memory_id=memory_id, namespace=ref.namespace, text=text, tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created), occurred_at=iso_time(occurred),
        chunk_count=int(chunk_count or 0),
        status=status(ready, expires),
        superseded_by=superseded_by or msgspec.UNSET, versions=versions or msgspec.UNSET,
        parts=ingesting(landed if landed and landed[1] else None).get("parts", msgspec.UNSET),
        task_id=task_id if not ready and task_id else msgspec.UNSET,
    )


def status(ready: bool, expires_at: float | None) -> str:
    """ready (searchable), ingesting, or expired: past its expires_at, left out of every read
    but this one until the sweep deletes it."""
    if expires_at is not None and float(expires_at) <= time.time():
        return "expired"
    return "ready" if ready else "ingesting"


async def read_stats(store: GraphStore, redis: Redis, settings: Settings,
                     request: StatsRequest) -> Stats:
    memories = ingesting = chunks = entities = relations = 0
    model, dim = "", 0
    if await namespace_exists(store, request.namespace):
        graph = store.graph(request.namespace)
        total, ingesting = (await run(graph, cypher_search.COUNT_MEMORIES, read_only=True))[0]
        chunks = (await run(graph, cypher_search.COUNT_CHUNKS, read_only=True))[0][0]
        memories = int(total or 0) - int(ingesting or 0)
        entities, relations = (await run(graph, cypher_graph.COUNT_ENTITIES, read_only=True))[0]
        found = await run(graph, cypher_schema.READ_MODEL, read_only=True)
        if found:
            model, dim = found[0][0], int(found[0][1])
    return Stats(
        namespace=request.namespace, memories=memories, chunks=int(chunks or 0),
        memories_ingesting=int(ingesting or 0),
        queue_depth=await tasks.queue_depth(redis),
        workers_alive=await heartbeat.count_alive(redis),
        tasks=await tasks.task_counts(redis, request.namespace, tasks.TASK_TTL),
        embedding_model=model, embedding_dim=dim, entities=int(entities or 0),
        relations=int(relations or 0),
    )
