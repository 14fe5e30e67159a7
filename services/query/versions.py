"""The versions of an updated memory, for get_memory: each version names the one it
replaces (m.supersedes) and, once a newer one is searchable, the one that replaced it
(m.superseded_by). Walked one step at a time from the memory both ways, at most
MAX_VERSIONS in all. Read-only."""

from __future__ import annotations

from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.search import iso_time
from zapomni.shared import cypher
from zapomni.shared.graphstore import run
from zapomni.shared.messages import Version

MAX_VERSIONS = 100


async def step(graph: AsyncGraph, memory_id: str) -> list | None:
    """(id, supersedes, superseded_by, created_at, ready) of one version; None when gone."""
    rows = await run(graph, cypher.VERSION_STEP, {"id": memory_id}, read_only=True)
    return rows[0] if rows else None


async def read_versions(graph: AsyncGraph, memory_id: str) -> tuple[str | None, list[Version]]:
    """(the version that replaced this memory or None, every version oldest first); the
    list is empty when the memory has no other version."""
    this = await step(graph, memory_id)
    if this is None:
        return None, []
    chain, seen = [this], {memory_id}
    while len(chain) < MAX_VERSIONS and chain[0][1] and chain[0][1] not in seen:
        older = await step(graph, chain[0][1])
        if older is None or older[2] not in (chain[0][0], None):
            break  # replaced by another version: not this one's
        seen.add(older[0])
        chain.insert(0, older)
    while len(chain) < MAX_VERSIONS and chain[-1][2] and chain[-1][2] not in seen:
        newer = await step(graph, chain[-1][2])
        if newer is None:
            break
        seen.add(newer[0])
        chain.append(newer)
    if len(chain) == 1:
        return this[2], []
    return this[2], [Version(memory_id=row[0], created_at=iso_time(row[3]),
                             status="ready" if row[4] else "ingesting",
                             current=bool(row[4]) and row[2] is None) for row in chain]
