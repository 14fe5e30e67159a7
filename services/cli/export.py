"""``zapomni export``: a namespace's searchable memories and its graph as gzip-compressed
JSON lines.

The first line is an ExportHeader (format, version, namespace, model, dimension, counts);
then an ExportedMemory per memory with its chunks' spans, their part of the graph (their
relationships to entities and the pairs they contributed) and, with ``--vectors``, their
vectors; then an ExportedEntity per Entity node and an ExportedRelation per relationship
between entities (shared/protocol/export.py). FalkorDB is read directly and read-only, a
page at a time by id (keyset: the page after the last id written; relationships a page of
entities at a time, from a cursor), so memory stays flat whatever the namespace's size.
Memories still being ingested, and expired ones, are left out; every version of an updated
memory is kept, with its links.
"""

from __future__ import annotations

import gzip
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import IO, Any

import msgspec
import numpy as np

from zapomni.services.cli.progress import MEMORIES, Progress
from zapomni.shared.protocol.errors import NotFound
from zapomni.shared.protocol.export import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ExportedChunk,
    ExportedEntity,
    ExportedLink,
    ExportedMemory,
    ExportedRelation,
    ExportHeader,
)
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_moves
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run

PAGE = 200  # memories (or entities) read per query
RELATIONS_PAGE = 1000  # relationships between entities read per query
COUNTED = ("weight", "evidence")  # RELATED's, counted again by an import from chunks' pairs

_decode_json = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


async def read_header(store: GraphStore, namespace: str, vectors: bool) -> ExportHeader:
    if not await namespace_exists(store, namespace):
        raise NotFound(f"namespace '{namespace}' does not exist on this server; "
                       "check the name (get_stats lists a namespace's memories)")
    graph = store.graph(namespace)
    meta = await run(graph, cypher_moves.READ_META, read_only=True)
    if not meta:
        raise NotFound(f"namespace '{namespace}' holds no memories yet; nothing to export")
    counts = await run(graph, cypher_moves.COUNT_EXPORT, {"now": time.time()}, read_only=True)
    entities = await run(graph, cypher_moves.COUNT_EXPORT_ENTITIES, read_only=True)
    return ExportHeader(format=EXPORT_FORMAT, version=EXPORT_VERSION, namespace=namespace,
                        model=meta[0][0], dim=int(meta[0][1]), memories=int(counts[0][0]),
                        chunks=int(counts[0][1]), vectors=vectors, exported_at=time.time(),
                        graph=True, entities=int(entities[0][0]))


async def memory_pages(store: GraphStore, namespace: str, vectors: bool
                       ) -> AsyncIterator[list[ExportedMemory]]:
    """The namespace's memories, a page at a time in id order."""
    graph = store.graph(namespace)
    meta = await run(graph, cypher_moves.READ_META, read_only=True)
    chunks_query = (cypher_moves.EXPORT_VECTORS[meta[0][2]] if vectors
                    else cypher_moves.EXPORT_CHUNKS)
    after = ""
    while True:
        rows = await run(graph, cypher_moves.EXPORT_PAGE,
                         {"after": after, "now": time.time(), "limit": PAGE}, read_only=True)
        if not rows:
            return
        ids = [row[0] for row in rows]
        chunk_rows = await run(graph, chunks_query, {"ids": ids}, read_only=True)
        links = await run(graph, cypher_moves.EXPORT_LINKS, {"ids": ids}, read_only=True)
        yield [exported(row, chunks) for row, chunks in zip(
            rows, group(ids, chunk_rows, links), strict=True)]
        after = ids[-1]


def group(ids: list[str], rows: list[list[Any]], link_rows: list[list[Any]]
          ) -> list[list[ExportedChunk]]:
    """Each memory's chunks, in order, with their relationships to entities."""
    links: dict[tuple[str, int], list[ExportedLink]] = defaultdict(list)
    for memory_id, idx, rel, entity, props in link_rows:
        links[memory_id, int(idx)].append(ExportedLink(type=rel, entity=entity,
                                                       props=dict(props)))
    by_memory: dict[str, list[ExportedChunk]] = defaultdict(list)
    for row in rows:
        vector = (np.asarray(row[8], dtype="<f4").tobytes()
                  if len(row) > 8 and row[8] is not None else None)
        by_memory[row[0]].append(ExportedChunk(
            idx=int(row[1]), char_start=int(row[2]), char_end=int(row[3]),
            tokens=int(row[4] or 0), vector=vector, entities_at=row[5],
            pairs=list(row[6] or []), code_targets=list(row[7] or []),
            links=links.get((row[0], int(row[1])), [])))
    return [sorted(by_memory[i], key=lambda c: c.idx) for i in ids]


async def entity_pages(store: GraphStore, namespace: str) -> AsyncIterator[list[ExportedEntity]]:
    """Every Entity node with its properties, a page at a time in id order."""
    graph = store.graph(namespace)
    after = ""
    while rows := await run(graph, cypher_moves.EXPORT_ENTITIES,
                            {"after": after, "limit": PAGE}, read_only=True):
        yield [ExportedEntity(id=eid, props={k: v for k, v in props.items() if k != "id"})
               for eid, props in rows]
        after = rows[-1][0]


async def relation_pages(store: GraphStore, namespace: str, ids: list[str]
                         ) -> AsyncIterator[list[ExportedRelation]]:
    """The relationships out of these entities, a page at a time from a cursor."""
    graph = store.graph(namespace)
    cursor = {"a": "", "t": "", "b": ""}
    while rows := await run(graph, cypher_moves.EXPORT_RELATIONS,
                            {"ids": ids, **cursor, "limit": RELATIONS_PAGE}, read_only=True):
        yield [ExportedRelation(type=rel, a=a, b=b, props={
            k: v for k, v in props.items() if rel != "RELATED" or k not in COUNTED})
            for a, rel, b, props in rows]
        cursor = dict(zip("atb", rows[-1][:3], strict=True))


def exported(row: list[Any], chunks: list[ExportedChunk]) -> ExportedMemory:
    (mid, text, content_hash, tags, source, metadata, created_at, thread, after, importance,
     memory_type, pinned, expires_at, supersedes, superseded_by, access_count,
     accessed_at, line_offset, occurred_at, role) = row
    return ExportedMemory(
        id=mid, text=text, content_hash=content_hash or "", tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=float(created_at), thread=thread or "", after=after or "",
        importance=importance, memory_type=memory_type or "", pinned=bool(pinned),
        expires_at=expires_at, supersedes=supersedes or "", superseded_by=superseded_by or "",
        access_count=int(access_count or 0), accessed_at=accessed_at,
        line_offset=int(line_offset or 0), occurred_at=float(occurred_at),
        role=role or "", chunks=chunks)


async def export_namespace(settings: Settings, namespace: str, out: IO[bytes], *,
                           vectors: bool, show: bool = True) -> ExportHeader:
    """Write the namespace to ``out`` (a binary stream; gzip-compressed here)."""
    store = GraphStore(settings, max_connections=2)
    try:
        header = await read_header(store, namespace, vectors)
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as zipped, \
                Progress(f"export {namespace}", header.memories, MEMORIES,
                         quiet=not show) as progress:
            zipped.write(_encode(header) + b"\n")
            written = 0
            async for page in memory_pages(store, namespace, vectors):
                zipped.write(b"".join(_encode(m) + b"\n" for m in page))
                written += len(page)
                progress.update(written)
            progress.update(written, note="entities")
            entities = await write_graph(store, namespace, zipped)
        return msgspec.structs.replace(header, memories=written, entities=entities)
    finally:
        await store.aclose()


async def write_graph(store: GraphStore, namespace: str, out: IO[bytes]) -> int:
    """Every entity, each page followed by the relationships out of it (an import writes
    both with MERGE on ids, in any order); how many entities."""
    written = 0
    async for page in entity_pages(store, namespace):
        out.write(b"".join(_encode(e) + b"\n" for e in page))
        written += len(page)
        async for relations in relation_pages(store, namespace, [e.id for e in page]):
            out.write(b"".join(_encode(r) + b"\n" for r in relations))
    return written


def open_output(path: str) -> IO[bytes]:
    if path in ("", "-"):
        return sys.stdout.buffer
    return open(path, "wb")  # noqa: SIM115 - closed by the caller
