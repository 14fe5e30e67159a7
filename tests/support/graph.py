"""What is stored, read straight from FalkorDB, for assertions."""

from __future__ import annotations

from shared.graphstore import GraphStore, namespace_exists, run
from shared.settings import Settings

COUNTS = {
    "memories": "MATCH (m:Memory) RETURN count(m)",
    "ready": "MATCH (m:Memory) WHERE m.ready RETURN count(m)",
    "chunks": "MATCH (c:Chunk) RETURN count(c)",
    "has_chunk": "MATCH (:Memory)-[r:HAS_CHUNK]->(:Chunk) RETURN count(r)",
    "next": "MATCH (:Chunk)-[r:NEXT]->(:Chunk) RETURN count(r)",
    "orphan_chunks": "MATCH (c:Chunk) WHERE NOT ()-[:HAS_CHUNK]->(c) RETURN count(c)",
}


async def stored(settings: Settings, namespace: str = "default") -> dict[str, int]:
    store = GraphStore(settings)
    try:
        if not await namespace_exists(store, namespace):
            return dict.fromkeys(COUNTS, 0)
        graph = store.graph(namespace)
        return {name: (await run(graph, q, read_only=True))[0][0] for name, q in COUNTS.items()}
    finally:
        await store.aclose()


async def query(settings: Settings, cypher: str, params=None, namespace: str = "default"):
    store = GraphStore(settings)
    try:
        return await run(store.graph(namespace), cypher, params, read_only=True)
    finally:
        await store.aclose()
