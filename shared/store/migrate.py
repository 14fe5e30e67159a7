"""The stored shape's version, the steps that bring a namespace written by an older version
up to it, and a namespace prepared for writes (its indexes, its shape, its embedding model).
Reads never branch on the shape: a namespace is migrated before they see it.

Each namespace's graph records its version (ZapomniMeta ``schema``; none: 1). Workers run
``migrate_store`` at start-up (every namespace; a namespace already current costs one read)
and ``migrate_namespace`` before their first write to a namespace (``prepare_namespace``);
``zapomni migrate`` runs it by hand. Every step is idempotent and batched, so workers
starting together, or a step cut short, only repeat work. A new graph is created at the
current version.

Versions:
  1  before event time
  2  Memory.occurred_at (event time, indexed): a memory without one happened when it was
     added (``occurred_at = created_at``); a namespace with replaced memories is marked
     (ZapomniMeta ``versions``: search reads older versions for the current one)
  3  Entity.ner_type (what the model said) apart from Entity.type (shown only where it
     holds): an entity written before shows no type until a graph rebuild
  4  a chunk's graph state (entities_at, graph_task, pairs, code_targets) on its HAS_CHUNK
     edge instead of the chunk (setting it there indexes nothing heavy), code_targets'
     index with it
  5  the keyword signal's postings of every chunk, kept in Redis beside the graph
     (shared/store/postings.py): a Python step, a page of node ids at a time; the write
     stamp dropped (nothing reads it)
  6  the postings compacted (shared/store/compaction.py): the terms written before count as
     holding junk once, so the first pass reads each, and its totals are counted (a Python
     step; the passes run in the background, workers/compact.py)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.exceptions

from zapomni.shared.protocol.errors import StoreError
from zapomni.shared.store import compaction, cypher_moves, cypher_schema, postings
from zapomni.shared.store.graphstore import (
    GRAPH_PREFIX,
    HNSW,
    Graph,
    GraphStore,
    list_graphs,
    model_mismatch,
    run,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 6
BATCH = 5000  # memories a step changes per statement
# the steps that reach each version, each run until it changes fewer than BATCH
# (a function: a step that needs more than Cypher, run once with the graph)
STEPS: dict[int, tuple[str | Callable[[Graph], Awaitable[int]], ...]] = {
    2: (cypher_schema.MIGRATE_EVENT_TIME, cypher_schema.MIGRATE_VERSIONS_MARK),
    3: (cypher_schema.MIGRATE_ENTITY_TYPES,),
    4: (cypher_schema.MIGRATE_MARKS,),
    5: (postings.backfill, cypher_schema.MIGRATE_DROP_STAMP),
    6: (compaction.seed,)}
# a step whose statement writes what FalkorDB indexes again (every chunk's vector and text)
# holds the graph's write lock longer a row: version 4's marks moved 2.2 ms a chunk at 10k
# chunks (scratch run of write_cost's fill, 2026-11-27), so 5,000 a statement held it 11 s;
# 500 hold it ~1 s at 10k, a few at 1M (each statement also scans the chunks left to move)
STEP_BATCH = {cypher_schema.MIGRATE_MARKS: 500}
# indexes a version no longer has, dropped before its steps (one already gone is fine), and
# those it adds, created after them (a worker that only migrates creates no other index)
DROPS: dict[int, tuple[str, ...]] = {4: (cypher_schema.DROP_CHUNK_TARGETS,)}
ADDS: dict[int, tuple[str, ...]] = {4: (cypher_schema.EDGE_TARGETS,)}


async def schema_version(store: GraphStore, namespace: str) -> int:
    rows = await run(store.graph(namespace), cypher_schema.READ_SCHEMA, read_only=True)
    return int(rows[0][0]) if rows and rows[0][0] is not None else 1


async def migrate_namespace(store: GraphStore, namespace: str) -> int:
    """Bring one namespace to SCHEMA_VERSION; the memories changed."""
    version = await schema_version(store, namespace)
    if version >= SCHEMA_VERSION:
        return 0
    graph = store.graph(namespace)
    changed = 0
    for step in range(version + 1, SCHEMA_VERSION + 1):
        await drop_indexes(graph, namespace, DROPS.get(step, ()))
        for query in STEPS[step]:
            if callable(query):
                changed += await query(graph)
                continue
            batch = STEP_BATCH.get(query, BATCH)
            while True:
                rows = await run(graph, query, {"batch": batch})
                done = int(rows[0][0]) if rows else 0
                changed += done
                if done < batch:
                    break
        await create_indexes(graph, namespace, [(q, None) for q in ADDS.get(step, ())])
        await run(graph, cypher_schema.WRITE_SCHEMA, {"version": step})
    log.info("namespace %s migrated from schema version %d to %d (%d memories or chunks changed)",
             namespace, version, SCHEMA_VERSION, changed)
    return changed


async def migrate_store(store: GraphStore) -> dict[str, int]:
    """Every namespace of the store: {namespace: memories changed} for those migrated."""
    migrated = {}
    for name in sorted(await list_graphs(store)):
        if name.startswith(GRAPH_PREFIX):
            namespace = name[len(GRAPH_PREFIX):]
            changed = await migrate_namespace(store, namespace)
            if changed:
                migrated[namespace] = changed
    return migrated


def vector_prop(namespace: str, row: list[Any], model: str, dim: int) -> str:
    """Which chunk property holds this model's vectors in the namespace (a ZapomniMeta row:
    model, dim, prop, next model, next dim): its own, or, while a reembed to this model is
    under way, the one the reembed writes. Raises on any other model."""
    have, prop = (row[0], int(row[1])), row[2] or cypher_moves.PROPS[0]
    if have == (model, dim):
        return prop
    if row[3] is not None and (row[3], int(row[4] or 0)) == (model, dim):
        return cypher_moves.other(prop)
    raise model_mismatch(namespace, have, (model, dim))


async def prepare_namespace(store: GraphStore, namespace: str, model: str, dim: int) -> str:
    """Create the indexes (before any MERGE: cypher_schema.SCHEMA), bring the namespace to the
    current stored shape, record its model (first writer wins), refuse another model; the
    chunk property this model's vectors go to. The record is read on every call (a reembed
    switches it); the indexes are created once per process, namespace and property."""
    graph = store.graph(namespace)
    rows = []
    if namespace in store.prepared:  # recorded already: a read, which runs beside writes
        rows = await run(graph, cypher_moves.READ_META, read_only=True)
    else:
        await create_indexes(graph, namespace, [(q, None) for q in cypher_schema.SCHEMA])
        await migrate_namespace(store, namespace)
    if not rows:
        rows = await run(graph, cypher_schema.CLAIM_MODEL, {"model": model, "dim": dim,
                                                     "now": time.time()})
    prop = vector_prop(namespace, rows[0], model, dim)
    if store.prepared.get(namespace) == (model, dim, prop):
        return prop
    hnsw = {"dim": dim, **HNSW}
    await create_indexes(graph, namespace, [(cypher_moves.VECTOR_INDEX[prop], hnsw)])
    store.prepared[namespace] = (model, dim, prop)
    return prop


async def drop_indexes(graph: Graph, namespace: str, queries: tuple[str, ...]) -> None:
    """Drop each index; one that does not exist (dropped by a step that ran before) is fine."""
    for query in queries:
        try:
            await graph.query(query)
        except redis.exceptions.ResponseError as exc:
            if "no such index" not in str(exc):
                raise StoreError(f"could not drop an index in namespace '{namespace}'") from exc


async def create_indexes(graph: Graph, namespace: str,
                         queries: list[tuple[str, dict[str, Any] | None]]) -> None:
    """Create each index; one that exists already is fine."""
    for query, params in queries:
        try:
            await graph.query(query, params)
        except redis.exceptions.ResponseError as exc:
            if "already indexed" not in str(exc):
                raise StoreError(f"could not create an index in namespace '{namespace}'") \
                    from exc
