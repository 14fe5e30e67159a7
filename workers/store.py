"""The worker's writes to FalkorDB: batched UNWIND/MERGE on ids, so a job that runs again
writes the same graph, never a second copy."""

from __future__ import annotations

import msgspec
import numpy as np
from falkordb.asyncio.graph import AsyncGraph

from shared import cypher
from shared.embed import to_params
from shared.graphstore import meta_pair
from shared.graphstore import run as run_query
from shared.ids import chunk_id
from shared.messages import ChunkSpan, IngestJob
from shared.metrics import FALKORDB_WRITE_SECONDS

_decode_json = msgspec.json.Decoder().decode
LINK_BATCH = 2000
DELETE_BATCH = 1000


async def run(graph: AsyncGraph, query: str, params: dict, op: str) -> list:
    with FALKORDB_WRITE_SECONDS.labels(op).time():
        return await run_query(graph, query, params)


def meta_pairs(metadata_json: str) -> list[str]:
    """Top-level scalar metadata as "key=<JSON value>" strings, so search can filter on
    equality with a list test instead of user-named properties in Cypher."""
    metadata = _decode_json(metadata_json)
    return sorted(meta_pair(key, value) for key, value in metadata.items()
                  if isinstance(value, str | int | float | bool))


async def write_memory(graph: AsyncGraph, job: IngestJob, chunk_count: int) -> None:
    await run(graph, cypher.MERGE_MEMORY, op="memory", params={
        "id": job.memory_id, "namespace": job.namespace, "content_hash": job.content_hash,
        "text": job.text, "source": job.source, "tags": job.tags,
        "metadata": job.metadata_json, "meta_kv": meta_pairs(job.metadata_json),
        "created_at": job.created_at, "chunk_count": chunk_count,
    })


async def write_chunks(graph: AsyncGraph, memory_id: str, chunks: list[ChunkSpan],
                       vectors: np.ndarray) -> None:
    rows = [
        {"id": chunk_id(memory_id, c.idx), "idx": c.idx, "text": c.text,
         "char_start": c.char_start, "char_end": c.char_end, "tokens": c.tokens, "vec": vec}
        for c, vec in zip(chunks, to_params(vectors), strict=True)
    ]
    await run(graph, cypher.MERGE_CHUNKS, {"memory_id": memory_id, "rows": rows}, "chunks")


async def link_chunks(graph: AsyncGraph, memory_id: str, chunk_count: int) -> None:
    pairs = [[chunk_id(memory_id, i), chunk_id(memory_id, i + 1)] for i in range(chunk_count - 1)]
    for start in range(0, len(pairs), LINK_BATCH):
        await run(graph, cypher.LINK_CHUNKS, {"pairs": pairs[start : start + LINK_BATCH]},
                  "link")


async def mark_ready(graph: AsyncGraph, memory_id: str) -> bool:
    return bool(await run(graph, cypher.MARK_READY, {"id": memory_id}, "ready"))


async def delete_memory_graph(graph: AsyncGraph, memory_id: str) -> tuple[int, int]:
    """Delete a memory's chunks (in batches) and then the memory; (memories, chunks) deleted."""
    chunks = 0
    while True:
        rows = await run(graph, cypher.DELETE_CHUNKS, {"id": memory_id, "batch": DELETE_BATCH},
                         "delete")
        deleted = int(rows[0][0]) if rows else 0
        chunks += deleted
        if deleted < DELETE_BATCH:
            break
    rows = await run(graph, cypher.DELETE_MEMORY, {"id": memory_id}, "delete")
    return (int(rows[0][0]) if rows else 0), chunks
