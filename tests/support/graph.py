"""What is stored, read straight from FalkorDB, for assertions."""

from __future__ import annotations

from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run
from zapomni.workers.store import EVIDENCE_KEEP

COUNTS = {
    "memories": "MATCH (m:Memory) RETURN count(m)",
    "ready": "MATCH (m:Memory) WHERE m.ready RETURN count(m)",
    "chunks": "MATCH (c:Chunk) RETURN count(c)",
    "has_chunk": "MATCH (:Memory)-[r:HAS_CHUNK]->(:Chunk) RETURN count(r)",
    "next": "MATCH (:Chunk)-[r:NEXT]->(:Chunk) RETURN count(r)",
    "orphan_chunks": "MATCH (c:Chunk) WHERE NOT ()-[:HAS_CHUNK]->(c) RETURN count(c)",
}
GRAPH_COUNTS = {
    "chunks": "MATCH (c:Chunk) RETURN count(c)",
    "entities": "MATCH (e:Entity) RETURN count(e)",
    "mentions": "MATCH (:Chunk)-[r:MENTIONS]->(:Entity) RETURN count(r)",
    "related": "MATCH (:Entity)-[r:RELATED]->(:Entity) RETURN count(r)",
    "evidence": "MATCH (:Entity)-[r:RELATED]->(:Entity) RETURN coalesce(sum(r.weight), 0)",
    "extracted": "MATCH ()-[h:HAS_CHUNK]->(c:Chunk) WHERE h.entities_at IS NOT NULL "
                 "RETURN count(c)",
}

# a consistent knowledge graph: each of these counts is 0
BROKEN = {
    # an entity no chunk mentions
    "orphan_entities": "MATCH (e:Entity) WHERE NOT (e)<-[:MENTIONS]-(:Chunk) RETURN count(e)",
    # a chunk not marked read (on its HAS_CHUNK edge) that has mentions (a half-written batch)
    "unmarked_mentions": "MATCH (c:Chunk)-[:MENTIONS]->() OPTIONAL MATCH ()-[h:HAS_CHUNK]->(c) "
                         "WITH c, collect(h.entities_at) AS marks WHERE size(marks) = 0 "
                         "RETURN count(c)",
    # evidence naming a chunk that is gone or does not mention both ends
    "bad_evidence": "MATCH (a:Entity)-[r:RELATED]->(b:Entity) UNWIND r.evidence AS id "
                    "OPTIONAL MATCH (c:Chunk {id: id}) WITH a, b, c "
                    "WHERE c IS NULL OR NOT (c)-[:MENTIONS]->(a) OR NOT (c)-[:MENTIONS]->(b) "
                    "RETURN count(*)",
    # weight: the number of chunks whose recorded pairs name the edge, exactly
    "weight_not_pairs": "MATCH (a:Entity)-[r:RELATED]->(b:Entity) "
                        "OPTIONAL MATCH ()-[h:HAS_CHUNK]->(:Chunk) "
                        "WHERE (a.id + ' ' + b.id) IN h.pairs "
                        "WITH r, count(h) AS n WHERE r.weight <> n RETURN count(r)",
    # a pair a chunk recorded with no edge for it
    "pair_without_edge": "MATCH ()-[h:HAS_CHUNK]->(:Chunk) UNWIND h.pairs AS p "
                         "WITH split(p, ' ') AS ab "
                         "OPTIONAL MATCH (:Entity {id: ab[0]})-[r:RELATED]->(:Entity {id: ab[1]}) "
                         "WITH r WHERE r IS NULL RETURN count(*)",
    # evidence: at most EVIDENCE_KEEP (workers/store.py) of the chunks, never more than weight
    "evidence_over_cap": "MATCH ()-[r:RELATED]->() WHERE size(r.evidence) > $keep "
                         "OR size(r.evidence) > r.weight OR size(r.evidence) = 0 "
                         "RETURN count(r)",
}


async def stored(settings: Settings, namespace: str = "default", *,
                 graph: bool = False) -> dict[str, int]:
    """Counts of what is stored; ``graph``: of the knowledge graph instead."""
    counts = GRAPH_COUNTS if graph else COUNTS
    store = GraphStore(settings)
    try:
        if not await namespace_exists(store, namespace):
            return dict.fromkeys(counts, 0)
        g = store.graph(namespace)
        return {name: (await run(g, q, read_only=True))[0][0] for name, q in counts.items()}
    finally:
        await store.aclose()


async def broken(settings: Settings, namespace: str = "default") -> dict[str, int]:
    rows = {name: await query(settings, q, {"keep": EVIDENCE_KEEP}, namespace=namespace)
            for name, q in BROKEN.items()}
    return {name: int(r[0][0]) for name, r in rows.items()}


async def query(settings: Settings, cypher: str, params=None, namespace: str = "default", *,
                write: bool = False):
    """Run a query on the namespace's graph (``write``: one that changes it)."""
    store = GraphStore(settings)
    try:
        return await run(store.graph(namespace), cypher, params, read_only=not write)
    finally:
        await store.aclose()
