"""The graph task's code path: the chunks of a code memory (its metadata names a language the
chunker knows) get the symbols of their file from its syntax tree (shared/text/code_symbols.py),
not spaCy. The file is parsed once per batch; each definition and each reference belongs to
the chunk that holds its line (the last chunk starting at or before it), so a chunk's
contribution is its own, replaced whole by cypher_code.REPLACE_CODE as the prose graph's is.

Files arrive in any order. A reference is linked when it is written if its target exists
(inside the statement), and kept by name in the chunk's ``code_targets`` (on its HAS_CHUNK
edge) either way; a batch that defines names new to the namespace then rewrites the chunks
already written that refer to them (cypher_code.PENDING, through an array index), a page at
a time. Both steps are replacements, so running either twice ends as running it once.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from dataclasses import dataclass, field

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.store import cypher_code, cypher_schema
from zapomni.shared.store.graphstore import execute, run
from zapomni.shared.text.chunking import code_language
from zapomni.shared.text.code_symbols import name_words, read_symbols
from zapomni.shared.text.code_tree import Definition, Symbols
from zapomni.shared.text.entities import entity_id

MAX_TARGETS = 1024  # names one chunk refers to, kept (a 256-token chunk holds ~100)
MAX_LINES = 32  # lines of one chunk's references to one symbol, kept on its MENTIONS
PENDING_PAGE = 64  # chunks rewritten at a time to link the names a batch defined
PENDING_ROUNDS = 64  # pages, at most, after one batch (64 x 64 chunks)
EVIDENCE_KEEP = 16  # as the prose graph's RELATED (workers/store.py)
# a pair's kind when one chunk records it twice: the stronger one
KIND_ORDER = ("defines", "inherits", "calls", "imports", "uses")


@dataclass
class CodeMemory:
    memory_id: str
    symbols: Symbols
    source: str
    line_offset: int
    starts: list[tuple[int, int, str]]  # (start line, chunk index, chunk id), in order


@dataclass
class Contribution:
    """What some chunks contribute, as REPLACE_CODE's parameters."""

    chunks: list[dict] = field(default_factory=list)
    entities: list[dict] = field(default_factory=list)
    mentions: list[dict] = field(default_factory=list)
    related: dict[tuple[str, str], dict] = field(default_factory=dict)


def code_chunks(rows: list) -> tuple[dict[str, list[str]], list]:
    """A graph batch's rows (chunk id, text, memory id, metadata: cypher_graph.GRAPH_BATCH)
    split: code memory id -> its chunk ids here, and the other rows."""
    code_memory = {row[0]: row[2] for row in rows if code_language(row[3] or "{}")}
    code: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row[0] in code_memory:
            code[code_memory[row[0]]].append(row[0])
    return dict(code), [row for row in rows if row[0] not in code_memory]


async def write_code(graph: AsyncGraph, code: dict[str, list[str]], task_id: str
                     ) -> tuple[int, int]:
    """Write these chunks' symbols, then link the chunks written before that refer to the
    names they defined first. Returns (entities, relations) created."""
    made, defined = await replace_code(graph, code, task_id)
    attempted: set[str] = set()
    for _ in range(PENDING_ROUNDS):
        if not defined:
            break
        rows = await run(graph, cypher_code.PENDING, {
            "symbols": [[key, entity_id(key)] for key in sorted(defined)],
            "limit": PENDING_PAGE + len(attempted)})
        fresh = [row[0] for row in rows if row[0] not in attempted]
        if not fresh:
            break
        attempted.update(fresh)
        more, _ = await replace_code(graph, by_memory(fresh), task_id)
        made = (made[0] + more[0], made[1] + more[1])
    return made


def by_memory(chunk_ids: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for cid in chunk_ids:
        grouped[cid.rpartition(":")[0]].append(cid)
    return dict(grouped)


async def replace_code(graph: AsyncGraph, code: dict[str, list[str]], task_id: str
                       ) -> tuple[tuple[int, int], set[str]]:
    """One statement for these chunks; ((entities, relations) created, names defined here
    that did not exist before)."""
    total = Contribution()
    for memory_id, chunk_ids in code.items():
        memory = await load_memory(graph, memory_id)
        if memory is not None:
            contribute(memory, set(chunk_ids), total)
    if not total.chunks:
        return (0, 0), set()
    if total.entities:
        await run(graph, cypher_schema.MARK_CODE, {})
    keys = {row["key"] for row in total.entities}
    existing = await run(graph, cypher_code.EXISTING, {"ids": [entity_id(k) for k in keys]})
    before = {row[0] for row in existing}
    result = await execute(graph, cypher_code.REPLACE_CODE, {
        "chunks": total.chunks, "entities": total.entities, "mentions": total.mentions,
        "related": list(total.related.values()), "now": time.time(), "task": task_id,
        "keep": EVIDENCE_KEEP})
    relations = int(result.result_set[0][1] or 0) if result.result_set else 0
    return (int(result.nodes_created), relations), {
        k for k in keys if entity_id(k) not in before}


async def load_memory(graph: AsyncGraph, memory_id: str) -> CodeMemory | None:
    """A code memory's symbols (its whole text parsed once) and its chunks' first lines."""
    rows = await run(graph, cypher_code.CODE_MEMORY, {"id": memory_id})
    if not rows or rows[0][0] is None:
        return None
    text, source, metadata, offset, chunks = rows[0]
    language = code_language(metadata or "{}")
    symbols = read_symbols(text, language, source or memory_id)
    starts = sorted((int(line or 0), int(cid.rpartition(":")[2]), cid) for cid, line in chunks)
    return CodeMemory(memory_id, symbols, source or "", int(offset or 0), starts)


def owner(memory: CodeMemory, line: int) -> str:
    """The chunk a line of the file belongs to: the last one starting at or before it
    (lines as chunks count them, after the memory's ``line_offset``)."""
    at = bisect.bisect_right(memory.starts, (line, 1 << 62, "")) - 1
    return memory.starts[max(0, at)][2]


def contribute(memory: CodeMemory, chunk_ids: set[str], into: Contribution) -> None:
    """Add what ``chunk_ids`` of ``memory`` contribute: the definitions and references on
    their lines."""
    here = set(chunk_ids)
    defined_in = {d.name: owner(memory, d.start_line + memory.line_offset)
                  for d in memory.symbols.definitions}
    pairs: dict[str, set[str]] = defaultdict(set)
    for d in memory.symbols.definitions:
        parent = d.name.rpartition(".")[0]
        if defined_in[d.name] in here and parent in defined_in:
            relate(into, pairs, defined_in[d.name], parent, d.name, "defines")
    uses = refer(memory, here, into, pairs)
    for (cid, target), lines in uses.items():
        if defined_in.get(target) != cid:
            into.mentions.append({"chunk": cid, "entity": entity_id(target), "count": len(lines),
                                  "role": "uses", "type": None,
                                  "lines": sorted(set(lines))[:MAX_LINES]})
    for d in memory.symbols.definitions:
        cid = defined_in[d.name]
        if cid in here:
            define(memory, d, cid, 1 + len(uses.get((cid, d.name), [])), into)
    into.chunks += [{"id": cid, "pairs": sorted(pairs[cid]),
                     "targets": sorted({t for c, t in uses if c == cid})[:MAX_TARGETS]}
                    for cid in sorted(here)]


def define(memory: CodeMemory, d: Definition, cid: str, count: int,
           into: Contribution) -> None:
    """The entity of a definition and the MENTIONS of the chunk that holds its first line."""
    start, end = d.start_line + memory.line_offset, d.end_line + memory.line_offset
    into.entities.append({
        "id": entity_id(d.name), "key": d.name, "name": d.name, "type": d.kind,
        "source": memory.source, "start_line": start, "end_line": end,
        "words": " ".join(name_words(d.name)), "summary": d.summary, "chunk": cid})
    into.mentions.append({"chunk": cid, "entity": entity_id(d.name), "count": count,
                          "role": "defines", "type": d.kind, "lines": [start]})


def refer(memory: CodeMemory, here: set[str], into: Contribution,
          pairs: dict[str, set[str]]) -> dict[tuple[str, str], list[int]]:
    """The references on the lines of the chunks ``here``: (chunk, target) -> their lines;
    their pairs recorded."""
    uses: dict[tuple[str, str], list[int]] = defaultdict(list)
    for ref in memory.symbols.references:
        at = ref.line + memory.line_offset
        cid = owner(memory, at)
        if cid in here and ref.target != ref.source:
            uses[(cid, ref.target)].append(at)
            relate(into, pairs, cid, ref.source, ref.target, ref.kind)
    return uses


def relate(into: Contribution, pairs: dict[str, set[str]], cid: str, a: str, b: str,
           kind: str) -> None:
    """Chunk ``cid`` records the pair a -> b (symbols' dotted names) of this kind."""
    ids = (entity_id(a), entity_id(b))
    if len(pairs[cid]) >= MAX_TARGETS and f"{ids[0]} {ids[1]}" not in pairs[cid]:
        return
    pairs[cid].add(f"{ids[0]} {ids[1]}")
    rel = into.related.setdefault(ids, {"a": ids[0], "b": ids[1], "kind": kind, "chunks": []})
    if KIND_ORDER.index(kind) < KIND_ORDER.index(rel["kind"]):
        rel["kind"] = kind
    if cid not in rel["chunks"]:
        rel["chunks"].append(cid)
