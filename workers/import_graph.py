"""The graph an export file carries, written by an import (workers/moves.py).

What a chunk contributed goes through the graph task's own statement
(cypher_graph.REPLACE_CONTRIBUTIONS): its MENTIONS, its pairs, and RELATED's weights and
evidence counted from them, the chunk marked read. So an import into a namespace that has a
graph adds to it as a graph task would, a batch written twice ends as if written once, and
an undo (a failed import's memories, swept) takes it back like any chunk's. Everything else
is copied as stored, MERGEd on ids: every property of every entity, a chunk's other
relationships to entities (and MENTIONS' properties beyond count and type), and the
relationships between entities (RELATED's but weight and evidence).
"""

from __future__ import annotations

import time
from collections import defaultdict

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.protocol.export import ExportedChunk
from zapomni.shared.protocol.ids import chunk_id
from zapomni.shared.protocol.jobs import ImportJob
from zapomni.shared.store import cypher_graph, cypher_moves, cypher_schema
from zapomni.workers.store import EVIDENCE_KEEP, counted, retype, run

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
        await run(graph, cypher_moves.IMPORT_CODE_TARGETS, {"rows": targets}, "entities")
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
        await run(graph, cypher_moves.IMPORT_ENTITIES,
                  {"rows": [{"id": e.id, "props": e.props} for e in job.entities]}, "entities")
        await retype(graph, [e.id for e in job.entities])
        if any("source" in e.props for e in job.entities):  # symbols of code (cypher_code)
            await run(graph, cypher_schema.MARK_CODE, {}, "entities")
    relations = defaultdict(list)
    for r in job.relations:
        if r.props or r.type != "RELATED":
            relations[r.type].append({"a": r.a, "b": r.b, "props": r.props})
    await write_typed(graph, relations, cypher_moves.import_relations)


async def write_typed(graph: AsyncGraph, rows: dict[str, list[dict]], query) -> None:
    """Rows grouped by relationship type, one statement per type."""
    for rel, group in sorted(rows.items()):
        await run(graph, query(rel), {"rows": group}, "entities")


async def unread(graph: AsyncGraph) -> int:
    """Chunks of the namespace's searchable memories not read for entities yet."""
    rows = await run(graph, cypher_graph.GRAPH_COUNT, {"memory_ids": None, "rebuild": False},
                     "entities")
    return int(rows[0][0]) if rows else 0
