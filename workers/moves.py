"""Importing a namespace (``zapomni import``): each ``import_batch`` job writes a batch of
whole memories from an export file. The file's chunks are kept when its model is the
worker's (vectors or not: the ids and texts its graph refers to), with its vectors when they
are of this model and dimension; a file from another model is chunked and embedded again,
and its graph left for a graph task to read.

The graph a file carries: each memory batch also writes what its chunks contributed, with
the graph task's own statement (cypher_graph.REPLACE_CONTRIBUTIONS), so it adds up in a
namespace that has a graph already and an undo takes it back like any chunk's; once every
memory is written, the later batches copy the entities' properties and every other
relationship (below).

An import becomes searchable at once at its end: every batch writes its memories not
searchable, and the job that writes the last one publishes all of the task's memories, a
page at a time. A failed or cancelled import leaves nothing searchable; the sweep removes
what it wrote (workers/upkeep.py). Every write MERGEs on the file's ids: a job that runs
again writes the same graph.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import msgspec
import numpy as np
from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.embedding.embed import to_params
from zapomni.shared.protocol.errors import EmbeddingRejected
from zapomni.shared.protocol.export import ExportedChunk, ExportedMemory
from zapomni.shared.protocol.ids import chunk_id
from zapomni.shared.protocol.jobs import ChunkSpan, ImportJob
from zapomni.shared.store import (
    cypher_graph,
    cypher_memories,
    cypher_moves,
    cypher_schema,
    postings,
)
from zapomni.shared.store.graphstore import run as run_query
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import IMPORT
from zapomni.shared.text.chunking import Lines, metadata_language
from zapomni.workers.outcome import JobRun, follow_with_graph, task_job
from zapomni.workers.resources import Resources
from zapomni.workers.store import (
    EVIDENCE_KEEP,
    counted,
    index_words,
    link_chunks,
    meta_pairs,
    retype,
)
from zapomni.workers.store import run as timed

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
PUBLISH_PAGE = 1000  # memories made searchable per statement at the end of an import


@task_job(IMPORT, ImportJob)
async def import_batch(res: Resources, run: JobRun, job: ImportJob) -> str:
    dim = await res.embedder.dimension()
    prop = await prepare_namespace(res.store, job.namespace, res.embedder.name, dim)
    graph = res.store.graph(job.namespace)
    embedded = 0
    if job.memories:
        spans, vectors, embedded = await chunk_vectors(res, job, dim)
        await write_batch(graph, job, spans, vectors, prop)
        if job.graph and keeps_chunks(job, res.embedder.name, dim):
            await write_contributions(graph, job)
    elif keeps_chunks(job, res.embedder.name, dim):
        await write_graph(graph, job)
    if embedded:
        await tasks.move(res.redis, job.task_id, ttl=res.task_ttl,
                         add={"embedded": embedded})
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl)
    if done < 0:
        return "ended"
    if done >= job.parts:
        return await finish(res, graph, job)
    return f"batch {job.part + 1}/{job.parts} written"


def keeps_chunks(job: ImportJob, model: str, dim: int) -> bool:
    """The file's chunks serve this worker: its model and dimension, and every memory has
    chunks (the graph of the file then applies as it is)."""
    return (job.model, job.dim) == (model, dim) and all(m.chunks for m in job.memories)


def reusable(job: ImportJob, model: str, dim: int) -> bool:
    """The file's vectors serve this worker too: every chunk has one."""
    return keeps_chunks(job, model, dim) and all(
        c.vector is not None and len(c.vector) == dim * 4
        for m in job.memories for c in m.chunks)


async def chunk_vectors(res: Resources, job: ImportJob, dim: int
                        ) -> tuple[list[list[ChunkSpan]], np.ndarray, int]:
    """Each memory's chunks and all their vectors, in order; and how many were embedded."""
    if keeps_chunks(job, res.embedder.name, dim):
        spans = [[ChunkSpan(idx=c.idx, text=m.text[c.char_start:c.char_end],
                            char_start=c.char_start, char_end=c.char_end, tokens=c.tokens)
                  for c in m.chunks] for m in job.memories]
        if reusable(job, res.embedder.name, dim):
            vectors = np.frombuffer(b"".join(c.vector or b"" for m in job.memories
                                             for c in m.chunks), dtype="<f4").reshape(-1, dim)
            return spans, vectors, 0
    else:
        spans = [res.chunker.split(m.text, metadata_language(m.metadata))
                 for m in job.memories]
    texts = [c.text for s in spans for c in s]
    vectors = await res.embedder.embed(texts)
    if vectors.shape != (len(texts), dim):
        raise EmbeddingRejected(f"the embedder returned vectors of shape {vectors.shape}, "
                                f"expected ({len(texts)}, {dim})")
    return spans, vectors, len(texts)


def memory_row(m: ExportedMemory, chunk_count: int) -> dict:
    metadata_json = _encode(m.metadata).decode()
    return {"id": m.id, "content_hash": m.content_hash, "text": m.text, "source": m.source,
            "tags": m.tags, "metadata": metadata_json, "meta_kv": meta_pairs(metadata_json),
            "created_at": m.created_at, "chunk_count": chunk_count, "after": m.after,
            "thread": m.thread, "importance": m.importance, "memory_type": m.memory_type,
            "pinned": m.pinned, "expires_at": m.expires_at or None,
            "supersedes": m.supersedes, "superseded_by": m.superseded_by or None,
            "access_count": m.access_count or None, "accessed_at": m.accessed_at,
            "line_offset": m.line_offset or None, "occurred_at": m.occurred_at,
            "role": m.role or None}


async def write_batch(graph: AsyncGraph, job: ImportJob, spans: list[list[ChunkSpan]],
                      vectors: np.ndarray, prop: str) -> None:
    params = to_params(vectors, decimals=None)  # exact: the file's float32 as they were
    rows: list[dict] = []
    counted: list[postings.Counted] = []
    at = 0
    for m, chunks in zip(job.memories, spans, strict=True):
        words = postings.counts_of([(chunk_id(m.id, c.idx), c.text) for c in chunks])
        rows.extend({"id": cid, "memory_id": m.id, "idx": c.idx,
                     "text": c.text, "char_start": c.char_start, "char_end": c.char_end,
                     "tokens": c.tokens, "words": length,
                     "start_line": first, "end_line": last, "vec": params[at + i]}
                    for i, (c, (first, last), (cid, _, length)) in enumerate(zip(
                        chunks, line_spans(m.text, chunks, m.line_offset), words, strict=True)))
        counted += words
        at += len(chunks)
    await run_query(graph, cypher_moves.IMPORT_MEMORIES, {
        "rows": [memory_row(m, len(s)) for m, s in zip(job.memories, spans, strict=True)],
        "namespace": job.namespace, "task_id": job.task_id})
    for start in range(0, len(rows), PUBLISH_PAGE):
        await run_query(graph, cypher_moves.IMPORT_CHUNKS[prop],
                        {"rows": rows[start : start + PUBLISH_PAGE]})
        await index_words(graph, counted[start : start + PUBLISH_PAGE])
    for m, chunks in zip(job.memories, spans, strict=True):
        if len(chunks) > 1:
            await link_chunks(graph, m.id, len(chunks))
    turns = [[m.after, m.id] for m in job.memories if m.after]
    if turns:
        await run_query(graph, cypher_moves.IMPORT_THREADS, {"pairs": turns})
    ids = [m.id for m in job.memories if m.thread]
    for memory_id in ids:  # a later turn written by an earlier batch
        await run_query(graph, cypher_memories.LINK_TURN_AFTER, {"id": memory_id})


def line_spans(text: str, chunks: list[ChunkSpan], line_offset: int = 0
               ) -> list[tuple[int, int]]:
    """Each chunk's first and last line in the text as sent (an export file's chunks carry
    none; the memory's text starts after ``line_offset`` stripped lines)."""
    lines = Lines(text, line_offset)
    return [lines.span(c.char_start, c.char_end) for c in chunks]


async def finish(res: Resources, graph: AsyncGraph, job: ImportJob) -> str:
    """The last batch is written: make the task's memories searchable, then end the task."""
    published = 0
    while True:
        rows = await run_query(graph, cypher_moves.PUBLISH_IMPORT,
                               {"task_id": job.task_id, "limit": PUBLISH_PAGE})
        count = int(rows[0][0]) if rows else 0
        published += count
        if count < PUBLISH_PAGE:
            break
    record = await tasks.get_task(res.redis, job.task_id)
    embedded = record.embedded if record is not None else 0
    # chunks that came unread (the file carries no graph, or not for this model) are read
    follow = (await follow_with_graph(res, job.task_id, job.namespace, None)
              if await unread(graph) else "")
    await tasks.move(res.redis, job.task_id, "done", ttl=res.task_ttl, done=job.parts,
                     finished_at=time.time(), error="", graph_task_id=follow,
                     message=f"imported: {published} memories made searchable, "
                             f"{embedded} chunks embedded"
                             + (f"; graph task {follow} reads their entities" if follow
                                else ""))
    log.info("import %s into %s: %d memories made searchable, %d chunks embedded",
             job.task_id, job.namespace, published, embedded)
    return "done"


# ---- the graph an export file carries ----
# What a chunk contributed goes through REPLACE_CONTRIBUTIONS (a batch written twice ends as
# if written once); everything else is copied as stored, MERGEd on ids: every property of
# every entity, a chunk's other links to entities, the relationships between entities.
# chunks whose contribution one statement replaces: the graph task's batch (workers/graph.py)
CONTRIBUTIONS_BATCH = 256
MENTION_PROPS = ("count", "type")  # what REPLACE_CONTRIBUTIONS writes on a MENTIONS


def with_ids(job: ImportJob) -> list[tuple[str, ExportedChunk]]:
    """The batch's chunks, with their ids (the source's: memory id and index)."""
    return [(chunk_id(m.id, c.idx), c) for m in job.memories for c in m.chunks]


def contribution(chunks: list[tuple[str, ExportedChunk]]) -> dict:
    """REPLACE_CONTRIBUTIONS' parameters for these chunks (entities are created bare, by id:
    their properties follow from the file's entity lines)."""
    entities: dict[str, dict] = {}
    mentions, related = [], defaultdict(list)
    for cid, chunk in chunks:
        for link in chunk.links:
            if link.type == "MENTIONS":
                kind = link.props.get("type")
                entities.setdefault(link.entity, {"id": link.entity, "key": None, "name": None,
                                                  "type": kind, "chunks": []})["chunks"].append(cid)
                mentions.append({"chunk": cid, "entity": link.entity, "type": kind,
                                 "count": link.props.get("count", 1)})
        for pair in chunk.pairs:
            related[pair].append(cid)
    return {"chunks": [{"id": cid, "pairs": chunk.pairs} for cid, chunk in chunks],
            "entities": list(entities.values()), "mentions": mentions,
            "related": [{"a": pair.split(" ")[0], "b": pair.split(" ")[1], "chunks": cids}
                        for pair, cids in related.items()]}


async def write_contributions(graph: AsyncGraph, job: ImportJob) -> None:
    """What the batch's chunks read for entities contributed, then every chunk's other
    links to entities (a kind of link may not come from reading: copied as it is)."""
    every = with_ids(job)
    chunks = [(cid, chunk) for cid, chunk in every if chunk.entities_at is not None]
    for start in range(0, len(chunks), CONTRIBUTIONS_BATCH):
        params = contribution(chunks[start : start + CONTRIBUTIONS_BATCH])
        result = await counted(graph, cypher_graph.REPLACE_CONTRIBUTIONS, {
            **params, "now": time.time(), "task": job.task_id,
            "keep": EVIDENCE_KEEP}, "entities")
        touched = result.result_set[0][2] if result.result_set else []
        await retype(graph, [*(e["id"] for e in params["entities"]), *(touched or [])])
    targets = [{"id": cid, "targets": c.code_targets} for cid, c in chunks if c.code_targets]
    if targets:
        await timed(graph, cypher_moves.IMPORT_CODE_TARGETS, {"rows": targets}, "entities")
    links = defaultdict(list)
    for cid, chunk in every:
        for link in chunk.links:
            props = {k: v for k, v in link.props.items()
                     if link.type != "MENTIONS" or k not in MENTION_PROPS}
            if props or link.type != "MENTIONS":
                links[link.type].append({"chunk": cid, "entity": link.entity, "props": props})
    await write_typed(graph, links, cypher_moves.import_links)


async def write_graph(graph: AsyncGraph, job: ImportJob) -> None:
    """The file's entities with every property, then its relationships between entities
    (their endpoints MERGEd: the lines come in any order). Types take their entities'
    mentions' again (the file's are the source's: the same, but for a namespace merged into)."""
    if job.entities:
        await timed(graph, cypher_moves.IMPORT_ENTITIES,
                  {"rows": [{"id": e.id, "props": e.props} for e in job.entities]}, "entities")
        await retype(graph, [e.id for e in job.entities])
        if any("source" in e.props for e in job.entities):  # symbols of code (cypher_code)
            await timed(graph, cypher_schema.MARK_CODE, {}, "entities")
    relations = defaultdict(list)
    for r in job.relations:
        if r.props or r.type != "RELATED":
            relations[r.type].append({"a": r.a, "b": r.b, "props": r.props})
    await write_typed(graph, relations, cypher_moves.import_relations)


async def write_typed(graph: AsyncGraph, rows: dict[str, list[dict]], query) -> None:
    """Rows grouped by relationship type, one statement per type."""
    for rel, group in sorted(rows.items()):
        await timed(graph, query(rel), {"rows": group}, "entities")


async def unread(graph: AsyncGraph) -> int:
    """Chunks of the namespace's searchable memories not read for entities yet."""
    rows = await timed(graph, cypher_graph.GRAPH_COUNT, {"memory_ids": None, "rebuild": False},
                     "entities")
    return int(rows[0][0]) if rows else 0
