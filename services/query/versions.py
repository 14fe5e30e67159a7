"""The versions of an updated memory: for get_memory, each version names the one it
replaces (m.supersedes) and, once a newer one is searchable, the one that replaced it
(m.superseded_by), walked one step at a time from the memory both ways, at most MAX_VERSIONS
in all; for search, the current version inherits what its older versions match. Read-only.

Inheriting (``inherit``): in a namespace where update_memory replaced a memory, search reads
older versions too; each older version a signal found passes its fused score to the current
version of its memory (the best of the two counts), then leaves the list (unless the filters
ask for older versions). A question in the words of the first statement ("Where does Ilyas
work?" against "Ilyas works at Hollowpine Games", replaced by "Ilyas left for a new job at
Glasswing") then finds the current one: ``why.version`` names the older version whose match
it inherited (``older``), with that match's rank and score.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.fusion import Candidate, ordered
from zapomni.shared.protocol.answers import SignalMatch, Version
from zapomni.shared.protocol.times import iso_time
from zapomni.shared.store import cypher_memories, cypher_search
from zapomni.shared.store.graphstore import run, run_cells

MAX_VERSIONS = 100
INHERIT_STEPS = 8  # versions walked from an older one to the current one, at most


async def step(graph: AsyncGraph, memory_id: str) -> list | None:
    """(id, supersedes, superseded_by, created_at, ready) of one version; None when gone."""
    rows = await run(graph, cypher_memories.VERSION_STEP, {"id": memory_id}, read_only=True)
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


async def current_versions(graph: AsyncGraph, memory_ids: list[str]) -> dict[str, str]:
    """older version -> the current version of its memory, for the ones replaced."""
    current: dict[str, str] = {}
    pending = list(memory_ids)
    for _ in range(INHERIT_STEPS):
        rows = (await run_cells(graph, cypher_search.REPLACED_BY, {"ids": pending})
                if pending else [])
        if not rows:
            break
        newer = {row[0]: row[1] for row in rows}
        for older, target in list(current.items()):
            if target in newer:
                current[older] = newer[target]
        for memory_id in pending:
            if memory_id in newer:
                current[memory_id] = newer[memory_id]
        pending = sorted({newer[m] for m in pending if m in newer})
    return current


async def inherit(graph: AsyncGraph, candidates: list[Candidate],
                  params: dict[str, Any]) -> list[Candidate]:
    """``candidates`` (read with older versions) with each older version's score passed
    to its current version (``params``: the search's filters, for a current version no
    signal found) and the older versions left out; best first."""
    replaced = await current_versions(graph, sorted({c.memory_id for c in candidates}))
    if not replaced:
        return candidates
    best: dict[str, Candidate] = {}
    for candidate in candidates:
        if candidate.memory_id not in replaced:
            best.setdefault(candidate.memory_id, candidate)
    heirs: dict[str, tuple[int, Candidate]] = {}  # current version -> its best older match
    for rank, candidate in enumerate(candidates, start=1):
        heir = replaced.get(candidate.memory_id)
        if heir is not None and heir not in heirs:
            heirs[heir] = (rank, candidate)
    missing = [[heir, int(older.row[1].rsplit(":", 1)[1])]
               for heir, (_, older) in heirs.items() if heir not in best]
    rows = await run_cells(graph, cypher_search.VERSION_HITS, {**params, "wanted": missing}) \
        if missing else []
    found = {row[0]: Candidate(row=row) for row in rows}
    out = {id(c): c for c in candidates if c.memory_id not in replaced}
    for heir, (rank, older) in heirs.items():
        mine = best.get(heir) or found.get(heir)
        if mine is None or (mine is best.get(heir) and mine.score >= older.score):
            continue  # gone, filtered out, or it matches better on its own
        why = {**mine.why, "version": SignalMatch(rank=rank, score=older.score,
                                                  older=older.memory_id)}
        out.pop(id(mine), None)
        lifted = replace(mine, score=older.score, why=why)
        out[id(lifted)] = lifted
    return ordered({c.row[1]: c for c in out.values()})
