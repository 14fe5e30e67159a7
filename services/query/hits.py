"""Search's hits as the user sees them: the candidates kept, capped per memory, re-ordered
(rank="memory", changed statements by time) and shaped with their memories' fields, the
lines they span and the entities they name; and why graph mode found nothing. Read-only."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.entities import Named, passage_entities, to_int
from zapomni.services.query.fusion import Candidate, share_page
from zapomni.services.query.rank import rank_by_memory, rank_pool, read_memories
from zapomni.services.query.timeline import TOP, newer_first
from zapomni.shared.protocol.answers import MoreMatch, PartsDone, RankPart, SearchHit
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.times import iso_time
from zapomni.shared.store import cypher_graph, cypher_search
from zapomni.shared.store.graphstore import run, run_cells

# results one memory may hold (its further matches are listed under its best): at 3 a big
# memory held 1.66 of hybrid's top 10 instead of 2.67, the labelled sets' figures unchanged
# (docs/benchmarks.md, "Mixed sizes and the per-memory cap")
MAX_PER_MEMORY = 3
_decode_json = msgspec.json.Decoder().decode


async def shape_results(graph: AsyncGraph, kept: list[Candidate], request: SearchRequest,
                        order: str = "") -> list[SearchHit]:
    """The first ``limit`` candidates (by relevance, or re-scored: rank="memory"; then changed
    statements newest or oldest first: ``order``, services/query/timeline.py) as hits, with
    their memories' fields and the entities their passages name. At most
    ``MAX_PER_MEMORY`` per memory: rank="memory" gives a memory's chunks the same recency,
    frequency and importance, so its best by relevance stay its best after re-scoring and
    capping first gives the final order's cap (and a pool of more memories)."""
    parts: dict[str, dict[str, RankPart]] = {}
    kept = share_page(kept, MAX_PER_MEMORY)
    prop = getattr(graph, "vector_prop", "embedding")
    if request.rank == "memory":
        pool = rank_pool(kept, request.limit)
        chunk_ids = [c.row[1] for c in pool]
        names, lines, fields = await asyncio.gather(
            passage_entities(graph, chunk_ids), chunk_lines(graph, chunk_ids),
            read_memories(graph, pool))
        wide = msgspec.structs.replace(request, limit=max(request.limit, TOP))
        kept, parts = rank_by_memory(pool, fields, wide)
        kept = (await newer_first(graph, kept, order, prop))[:request.limit]
    else:
        kept = (await newer_first(graph, kept, order, prop))[:request.limit]
        chunk_ids = [c.row[1] for c in kept]
        names, lines, fields = await asyncio.gather(
            passage_entities(graph, chunk_ids), chunk_lines(graph, chunk_ids),
            memory_fields(graph, [c.memory_id for c in kept]))
    return [shape_hit(c, fields[c.memory_id], names.get(c.row[1], []), parts.get(c.row[1], {}),
                      lines.get(c.row[1], (None, None)))
            for c in kept if c.memory_id in fields]


async def why_empty(graph: AsyncGraph, named: Named | None) -> str:
    """Graph mode found nothing: say why, so that an empty list is not a mystery."""
    if named is not None and named.direct:
        return ("the entities the query names are mentioned in no passage that passes the "
                "filters, or in too many passages to tell them apart; mode \"hybrid\" also "
                "searches meaning and words")
    entities = int((await run(graph, cypher_graph.COUNT_ENTITIES, read_only=True))[0][0] or 0)
    if not entities:
        return ("the knowledge graph of this namespace has no entities yet (they are read "
                "after each ingest, or by build_graph); mode \"hybrid\" searches meaning and "
                "words")
    return (f"no entity of the knowledge graph ({entities:,} in this namespace: people, "
            "places, organisations, works...) is named in the query; mode \"hybrid\" also "
            "searches meaning and words")


async def memory_fields(graph: AsyncGraph, memory_ids: list[str]) -> dict[str, list[Any]]:
    """Tags, source, metadata and time of the memories of the kept hits."""
    if not memory_ids:
        return {}
    rows = await run_cells(graph, cypher_search.MEMORY_FIELDS, {"ids": sorted(set(memory_ids))})
    return {row[0]: row[1:] for row in rows}


async def chunk_lines(graph: AsyncGraph, chunk_ids: list[str]
                      ) -> dict[str, tuple[int | None, int | None]]:
    """The lines each kept chunk spans (stored at ingest: reading them from the memory's
    text here would read up to the whole text per hit)."""
    if not chunk_ids:
        return {}
    rows = await run_cells(graph, cypher_search.CHUNK_LINES, {"ids": chunk_ids})
    return {row[0]: (row[1], row[2]) for row in rows}


def shape_hit(candidate: Candidate, fields: list[Any], entities: list[str] | None = None,
              rank_parts: dict[str, RankPart] | None = None,
              lines: tuple[int | None, int | None] = (None, None)) -> SearchHit:
    memory_id, chunk_id, text, _, start, end = candidate.row
    tags, source, metadata, created, occurred, landed = fields[:6]
    first, last = lines
    return SearchHit(**ingesting(landed),
        memory_id=memory_id, chunk_id=chunk_id, text=text, score=candidate.score,
        char_start=int(start), char_end=int(end), tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created), occurred_at=iso_time(occurred),
        start_line=to_int(first), end_line=to_int(last),
        why=candidate.why, also_matched=candidate.also_matched,
        entities=entities or [], rank_parts=rank_parts or {},
        outdated_by=candidate.outdated_by or msgspec.UNSET,
        more=[MoreMatch(chunk_id=c.row[1], char_start=c.span[0], char_end=c.span[1],
                        score=c.score) for c in candidate.more],
    )


def ingesting(landed: list[int] | None) -> dict[str, Any]:
    """The fields that say a memory is still being ingested (cypher_search._LANDED: [parts written,
    parts], null once it is complete): none for a complete one."""
    if landed is None:
        return {}
    return {"status": "ingesting", "parts": PartsDone(done=int(landed[0]),
                                                      total=int(landed[1]))}
