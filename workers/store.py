"""The worker's writes to FalkorDB: batched UNWIND/MERGE on ids, so a job that runs again
writes the same graph, never a second copy."""

from __future__ import annotations

import time
from collections import defaultdict

import msgspec
import numpy as np
from falkordb.asyncio.graph import AsyncGraph
from falkordb.query_result import QueryResult

from zapomni.shared.embedding.embed import to_params
from zapomni.shared.metrics import FALKORDB_WRITE_SECONDS
from zapomni.shared.protocol.ids import chunk_id
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.store import (
    cypher_batch,
    cypher_code,
    cypher_graph,
    cypher_memories,
    cypher_moves,
    cypher_schema,
    postings,
)
from zapomni.shared.store.graphstore import execute, meta_pair
from zapomni.shared.store.graphstore import run as run_query
from zapomni.shared.text.entities import entity_id
from zapomni.workers.extract import ChunkEntities, mentioned_keys, settle

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


def memory_row(job: IngestJob, chunk_count: int) -> dict:
    """MERGE_MEMORY's parameters for ``job`` (one memory's, or a row of a batch's)."""
    return {
        "id": job.memory_id, "namespace": job.namespace, "content_hash": job.content_hash,
        "text": job.text, "source": job.source, "tags": job.tags,
        "metadata": job.metadata_json, "meta_kv": meta_pairs(job.metadata_json),
        "created_at": job.created_at, "chunk_count": chunk_count, "after": job.after,
        "task_id": job.task_id, "gen": job.gen, "thread": job.thread,
        "importance": job.importance, "memory_type": job.memory_type, "pinned": job.pinned,
        "expires_at": job.expires_at or None, "supersedes": job.supersedes,
        "line_offset": job.line_offset or None, "occurred_at": job.occurred_at,
        "role": job.role or None,
    }


async def write_memory(graph: AsyncGraph, job: IngestJob, chunk_count: int) -> bool:
    """Write the memory node (not yet searchable); False when a newer ingest of the same
    text has written it meanwhile (this job's writes are then someone else's leftovers)."""
    rows = await run(graph, cypher_memories.MERGE_MEMORY, memory_row(job, chunk_count), op="memory")
    if not rows or not rows[0][0]:
        return False
    if job.thread:
        # whichever of two neighbours is written second makes the edge (writes to a graph
        # are serialised), so workers may write a thread's turns in any order
        await run(graph, cypher_memories.LINK_TURN_BEFORE,
                  {"id": job.memory_id, "after": job.after}, op="memory")
        await run(graph, cypher_memories.LINK_TURN_AFTER, {"id": job.memory_id}, op="memory")
    return True


async def write_chunks(graph: AsyncGraph, memory_id: str, chunks: list[ChunkSpan],
                       vectors: np.ndarray, prop: str = "embedding") -> None:
    """``prop``: the chunk property the embedder's vectors go to (shared/store/cypher_moves.py)."""
    rows, counted = chunk_rows(memory_id, chunks, vectors)
    await indexed(graph, counted, cypher_moves.MERGE_CHUNKS[prop],
                  {"memory_id": memory_id, "rows": rows})


async def indexed(graph: AsyncGraph, counted: list[postings.Counted], merge: str,
                  params: dict) -> None:
    """Run ``merge`` (it returns the ids of the chunks it wrote) between numbering the chunks'
    keyword postings and settling them: those it did not write (their memory was deleted
    while the text was embedded) are forgotten (shared/store/postings.py)."""
    with FALKORDB_WRITE_SECONDS.labels("postings").time():
        claims = await postings.write_postings(graph, counted)
    written = await run(graph, merge, params, "chunks")
    with FALKORDB_WRITE_SECONDS.labels("postings").time():
        await postings.settle(graph, claims, {row[0] for row in written})


async def index_words(graph: AsyncGraph, counted: list[postings.Counted]) -> None:
    """The keyword signal's postings of chunks the graph holds already (an import's)."""
    with FALKORDB_WRITE_SECONDS.labels("postings").time():
        await postings.index_written(graph, counted)


def chunk_rows(memory_id: str, chunks: list[ChunkSpan], vectors: np.ndarray
               ) -> tuple[list[dict], list[postings.Counted]]:
    """The chunks' rows and their keyword counts, from one split of each text."""
    counted = postings.counts_of([(chunk_id(memory_id, c.idx), c.text) for c in chunks])
    return [
        {"id": cid, "idx": c.idx, "text": c.text,
         "char_start": c.char_start, "char_end": c.char_end, "tokens": c.tokens,
         "start_line": c.start_line or None, "end_line": c.end_line or None,
         "words": length, "vec": vec}
        for c, (cid, _, length), vec in zip(chunks, counted, to_params(vectors), strict=True)
    ], counted


# ---- a batch of small memories (workers/ingest.py): each step one statement for all ----

async def write_memories(graph: AsyncGraph, members: list[tuple[IngestJob, int]]) -> None:
    """write_memory for a batch, (job, its chunk count) each, in one statement per step."""
    rows = [memory_row(job, count) for job, count in members]
    await run(graph, cypher_batch.MERGE_MEMORIES, {"rows": rows}, op="memory")
    turns = [{"id": job.memory_id, "after": job.after} for job, _ in members if job.thread]
    if turns:
        await run(graph, cypher_batch.LINK_TURNS_BEFORE, {"rows": turns}, op="memory")
        await run(graph, cypher_batch.LINK_TURNS_AFTER, {"rows": turns}, op="memory")


async def write_batch_chunks(graph: AsyncGraph, members: list[tuple[str, list[ChunkSpan]]],
                             vectors: np.ndarray, prop: str = "embedding") -> None:
    """The chunks of a batch's memories, (memory id, its chunks) each, with their vectors in
    that order, in one statement, then linked in order."""
    rows: list[dict] = []
    counted: list[postings.Counted] = []
    at = 0
    for memory_id, chunks in members:
        mine, words = chunk_rows(memory_id, chunks, vectors[at : at + len(chunks)])
        rows += [{**row, "memory_id": memory_id} for row in mine]
        counted += words
        at += len(chunks)
    await indexed(graph, counted, cypher_batch.MERGE_CHUNKS[prop], {"rows": rows})
    await link_pairs(graph, [[chunk_id(m, i), chunk_id(m, i + 1)] for m, chunks in members
                             for i in range(len(chunks) - 1)])


async def mark_all_ready(graph: AsyncGraph, members: list[IngestJob]) -> set[str]:
    """Make these memories searchable, each if it is still its job's; the ids made so."""
    rows = await run(graph, cypher_batch.MARK_READY, {"rows": [
        {"id": job.memory_id, "task_id": job.task_id} for job in members]}, "ready")
    return {row[0] for row in rows}


async def link_chunks(graph: AsyncGraph, memory_id: str, chunk_count: int) -> None:
    await link_pairs(graph, [[chunk_id(memory_id, i), chunk_id(memory_id, i + 1)]
                             for i in range(chunk_count - 1)])


async def link_pairs(graph: AsyncGraph, pairs: list[list[str]]) -> None:
    for start in range(0, len(pairs), LINK_BATCH):
        await run(graph, cypher_memories.LINK_CHUNKS, {"pairs": pairs[start : start + LINK_BATCH]},
                  "link")


async def mark_ready(graph: AsyncGraph, memory_id: str, task_id: str) -> bool:
    """Make the memory searchable, if it is still this task's."""
    return bool(await run(graph, cypher_memories.MARK_READY, {"id": memory_id, "task_id": task_id},
                          "ready"))


async def mark_landing(graph: AsyncGraph, memory_id: str, task_id: str, done: int,
                       parts: int) -> None:
    """A part of a new memory has landed: search finds its written parts from now on, as
    still ingesting (cypher_memories.MARK_LANDING; a new version waits for its last part)."""
    await run(graph, cypher_memories.MARK_LANDING, {"id": memory_id, "task_id": task_id,
                                                    "done": done, "parts": parts}, "ready")


async def delete_memory_graph(graph: AsyncGraph, memory_id: str) -> tuple[int, int]:
    """Delete a memory: what its chunks added to the knowledge graph, its place among its
    versions, its chunks (in batches), and the memory node last; (memories, chunks) deleted.
    A delete that stops anywhere, even for good, leaves the memory stored, so it can be
    deleted again: never chunks whose memory is gone (which no delete could reach). A chunk
    an old writer adds meanwhile is removed by that writer's undo, which it runs when it
    finds the memory taken from it."""
    rows = await run(graph, cypher_memories.MEMORY_CHUNK_IDS, {"id": memory_id}, "delete")
    await forget_entities(graph, [row[0] for row in rows])
    await splice_versions(graph, memory_id)
    chunks = await _delete_chunks(graph, cypher_memories.CHUNKS_TO_DELETE,
                                  cypher_memories.DELETE_CHUNKS, {"id": memory_id})
    rows = await run(graph, cypher_memories.DELETE_MEMORY, {"id": memory_id}, "delete")
    return (int(rows[0][0]) if rows else 0), chunks


async def undo_memory(graph: AsyncGraph, memory_id: str, task_id: str) -> int:
    """Remove what the ingest ``task_id`` wrote, as long as the memory is its own (or gone):
    a newer ingest of the same text that took the memory over keeps it. Chunks removed."""
    await splice_versions(graph, memory_id, task_id)
    rows = await run(graph, cypher_memories.UNDO_READ_CHUNKS,
                     {"id": memory_id, "task_id": task_id}, "delete")
    await forget_entities(graph, [row[0] for row in rows])  # an import's graph (moves.py)
    await run(graph, cypher_memories.UNDO_MEMORY, {"id": memory_id, "task_id": task_id}, "delete")
    return await _delete_chunks(graph, cypher_memories.UNDO_CHUNKS_TO_DELETE,
                                cypher_memories.UNDO_CHUNKS, {"id": memory_id, "task_id": task_id})


# ---- update: versions ----
MAX_VERSIONS = 100  # versions of one memory walked through, at most


async def supersede(graph: AsyncGraph, memory_id: str) -> str:
    """The memory has just become searchable: if it is a new version (update_memory), it
    replaces the newest version of the memory it was made from, which search then leaves
    out. Returns the id replaced ('' when none). Idempotent: a second run finds it done."""
    rows = await run(graph, cypher_memories.VERSION_OF, {"id": memory_id}, "ready")
    old = (rows[0][0] or "") if rows else ""
    for _ in range(MAX_VERSIONS):
        if not old or old == memory_id:
            return ""
        rows = await run(graph, cypher_memories.SUPERSEDE, {"id": memory_id, "old": old}, "ready")
        if not rows:
            return ""  # the old version was deleted meanwhile: nothing to replace
        was = rows[0][0]
        if was is None or was == memory_id:
            await run(graph, cypher_schema.MARK_VERSIONS, {}, "ready")
            return old
        old = was  # another version replaced it first: replace the newest
    return ""


async def splice_versions(graph: AsyncGraph, memory_id: str, task_id: str | None = None
                          ) -> None:
    """Before a version goes: the one before it is replaced by the one after it, or, when
    it was the newest, is current again (searchable); the one after it replaces the one
    before. ``task_id``: only while that ingest wrote it (an undo). Idempotent."""
    params = {"id": memory_id, "task_id": task_id}
    await run(graph, cypher_memories.SPLICE_BEFORE, params, "delete")
    await run(graph, cypher_memories.SPLICE_AFTER, params, "delete")


async def _delete_chunks(graph: AsyncGraph, read: str, delete: str, params: dict) -> int:
    """Delete the chunks ``read`` finds, a batch at a time: the keyword postings forget each
    batch first (a delete cut short between the two forgets nothing twice: they are numbered
    once). The chunks deleted."""
    removed = 0
    while True:
        rows = await run(graph, read, {**params, "batch": DELETE_BATCH}, "delete")
        if not rows:
            return removed
        await postings.forget(graph, [(chunk_id, text) for chunk_id, text in rows])
        done = await run(graph, delete, {**params, "ids": [row[0] for row in rows]}, "delete")
        if not done or not int(done[0][0]):
            # the memory is no longer this delete's (a newer ingest took it): its chunks stay
            await postings.index_written(graph, postings.counts_of(
                [(chunk_id, text) for chunk_id, text in rows]))
            return removed
        removed += int(done[0][0])
        if len(rows) < DELETE_BATCH:
            return removed


# ---- the knowledge graph ----

EVIDENCE_KEEP = 16  # chunk ids a RELATED edge keeps as evidence (the latest); weight counts all
MAX_PAIRS_PER_CHUNK = 128  # related pairs one chunk contributes (and records), at most


async def write_entities(graph: AsyncGraph, chunk_ids: list[str], found: list[ChunkEntities],
                         task_id: str) -> tuple[int, int]:
    """Replace what these chunks contribute to the knowledge graph by what ``found`` says
    (entities, MENTIONS with counts, RELATED pairs), mark them read and stamp them with the
    task, all in one statement (cypher_graph.REPLACE_CONTRIBUTIONS): a batch written twice, or
    rewritten by a rebuild, ends as if written once. Returns (entities, relations) created."""
    entities: dict[str, dict] = {}
    mentions, related, chunks = [], defaultdict(list), []
    for cid, chunk in zip(chunk_ids, found, strict=True):
        for key, (name, kind, count) in chunk.mentions.items():
            eid = entity_id(key)
            entities.setdefault(eid, {"id": eid, "key": key, "name": name, "type": kind,
                                      "chunks": []})["chunks"].append(cid)
            mentions.append({"chunk": cid, "entity": eid, "count": count, "type": kind})
        pairs = sorted(f"{entity_id(a)} {entity_id(b)}" for a, b in chunk.pairs)
        pairs = pairs[:MAX_PAIRS_PER_CHUNK]
        for pair in pairs:
            related[pair].append(cid)
        chunks.append({"id": cid, "pairs": pairs})
    result = await counted(graph, cypher_graph.REPLACE_CONTRIBUTIONS, {
        "chunks": chunks, "entities": list(entities.values()), "mentions": mentions,
        "related": [{"a": pair.split(" ")[0], "b": pair.split(" ")[1], "chunks": cids}
                    for pair, cids in related.items()],
        "now": time.time(), "task": task_id, "keep": EVIDENCE_KEEP}, "entities")
    relations, touched = result.result_set[0][1:3] if result.result_set else (0, [])
    await retype(graph, [*entities, *(touched or [])])
    return int(result.nodes_created), int(relations or 0)


async def retype(graph: AsyncGraph, entity_ids: list[str], keys: list[str] = ()) -> None:
    """These entities' types and aliases, set again (workers/extract.py)."""
    with FALKORDB_WRITE_SECONDS.labels("entities").time():
        await settle(graph, entity_ids, keys)


async def counted(graph: AsyncGraph, query: str, params: dict, op: str) -> QueryResult:
    with FALKORDB_WRITE_SECONDS.labels(op).time():
        return await execute(graph, query, params)


async def forget_entities(graph: AsyncGraph, chunk_ids: list[str]) -> None:
    """Undo what these chunks contributed (their MENTIONS, one off the weight of each pair
    they recorded, entities and edges left with nothing, symbols of code no chunk defines
    any more) and unmark them, a statement or two per batch: a forget that runs again finds
    nothing left to undo."""
    for start in range(0, len(chunk_ids), DELETE_BATCH):
        ids = chunk_ids[start : start + DELETE_BATCH]
        keys = await mentioned_keys(graph, ids)
        rows = await run(graph, cypher_graph.REPLACE_CONTRIBUTIONS, {
            "chunks": [{"id": cid, "pairs": None} for cid in ids], "entities": [],
            "mentions": [], "related": [], "now": None, "task": None,
            "keep": EVIDENCE_KEEP}, "unlink")
        touched = list(rows[0][2] or []) if rows else []
        await retype(graph, touched, keys)
        await run(graph, cypher_code.DROP_UNDEFINED, {"ids": touched}, "unlink")


async def drop_orphans(graph: AsyncGraph) -> int:
    """Remove every Entity no chunk mentions, in batches; how many."""
    removed = 0
    while True:
        rows = await run(graph, cypher_graph.DROP_ORPHANS, {"batch": DELETE_BATCH}, "unlink")
        count = int(rows[0][0]) if rows else 0
        removed += count
        if count < DELETE_BATCH:
            return removed
