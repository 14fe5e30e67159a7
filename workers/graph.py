"""The knowledge-graph path: plan -> (fan out) -> read entities in batches -> write.

``build_graph`` counts the chunks a graph task covers (those not read yet, or all on
rebuild) and splits them into ``graph_part`` jobs of about ``PART_CHUNKS`` chunks: ranges of
chunk ids for the whole namespace (ids start with a hash: equal slices of the hash hold
about equal numbers of chunks), groups of memories for some memories; no job holds more
than one batch of chunk ids. A part reads ``BATCH`` chunks at a time in id order from a
cursor (code from its file's syntax tree, below; prose with spaCy: workers/extract.py),
replaces what they contributed in one statement, and adds to the task's progress; after its
share of the job time limit it passes the cursor to a continuation job. A rebuild stamps
each chunk with its task, batch by batch: a cancel or crash leaves every chunk with its old
or its new contribution, never neither, and a part run again skips what it rewrote.

Code: each definition and reference of a file (parsed once per batch) belongs to the chunk
holding its line (the last starting at or before it), so a chunk's contribution is its own,
replaced whole by cypher_code.REPLACE_CODE. Files arrive in any order: a reference is linked
when written if its target exists, and kept by name in the chunk's ``code_targets`` either
way; a batch that defines names new to the namespace rewrites, a page at a time, the chunks
already written that refer to them (cypher_code.PENDING). Both steps are replacements.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec
from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared import metrics
from zapomni.shared.protocol.jobs import GraphJob, GraphPartJob
from zapomni.shared.store import cypher_code, cypher_graph, cypher_schema
from zapomni.shared.store.graphstore import execute, run
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import BUILD_GRAPH, GRAPH_PART, enqueue_graph_part
from zapomni.shared.text.chunking import code_language
from zapomni.shared.text.code_symbols import name_words, read_symbols
from zapomni.shared.text.code_tree import Definition, Symbols
from zapomni.shared.text.entities import entity_id
from zapomni.workers.outcome import SLICE_SECONDS, JobRun, progressed, task_job
from zapomni.workers.resources import Resources
from zapomni.workers.store import EVIDENCE_KEEP, drop_orphans, write_entities

log = logging.getLogger(__name__)

# chunk ids are "mem_<hex>:<n>" (shared/protocol/ids.py): "" is below every id and "~" above
FIRST, END = "", "~"
HASH_DIGITS = 8  # hex digits of the memory hash that range boundaries use
PART_CHUNKS = 512  # chunks per graph job; a larger task fans out over the workers
BATCH = 64  # chunks per NER batch and per write; the task's progress moves after each

@task_job(BUILD_GRAPH, GraphJob)
async def build_graph(res: Resources, run_: JobRun, job: GraphJob) -> str:
    graph = res.store.graph(job.namespace)
    rows = await run(graph, cypher_graph.GRAPH_COUNT, {"memory_ids": job.memory_ids,
                                                       "rebuild": job.rebuild})
    total = int(rows[0][0]) if rows else 0
    parts = await plan(graph, job, total, PART_CHUNKS)
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, total=total,
                     message=f"{total} chunks to read in {len(parts)} part(s)")
    if total == 0 or not parts:
        await finish(res, job.task_id, job.namespace, "nothing new to read")
        return "done"
    if len(parts) == 1:
        return await extract_part(res, parts[0], run_.started)
    for part in parts:
        await enqueue_graph_part(res.redis, res.settings, part)
    return f"fanned out into {len(parts)} parts"


@task_job(GRAPH_PART, GraphPartJob)
async def graph_part(res: Resources, run_: JobRun, job: GraphPartJob) -> str:
    return await extract_part(res, job, run_.started)


async def plan(graph: AsyncGraph, job: GraphJob, total: int, size: int) -> list[GraphPartJob]:
    """The parts of a task: O(total / size) small jobs, no chunk ids."""
    if job.memory_ids is None:
        scopes = [(None, after, last) for after, last in hash_ranges(-(-total // size))]
    else:
        rows = await run(graph, cypher_graph.MEMORY_SIZES, {"memory_ids": job.memory_ids})
        scopes = [(group, FIRST, END) for group in memory_groups(rows, size)]
    return [GraphPartJob(task_id=job.task_id, namespace=job.namespace, part=i,
                         parts=len(scopes), rebuild=job.rebuild,
                         memory_ids=ids, after=after, last=last)
            for i, (ids, after, last) in enumerate(scopes)]


def hash_ranges(parts: int) -> list[tuple[str, str]]:
    """``parts`` ranges (after, last] of chunk ids that together cover every id once."""
    parts = max(1, parts)
    bounds = [FIRST] + [f"mem_{i * 16**HASH_DIGITS // parts:0{HASH_DIGITS}x}"
                        for i in range(1, parts)] + [END]
    return list(zip(bounds, bounds[1:], strict=False))


def memory_groups(rows: list, size: int) -> Iterator[list[str]]:
    """Memories (id, chunk count; in id order) in groups of about ``size`` chunks."""
    group: list[str] = []
    chunks = 0
    for memory_id, count in rows:
        if group and chunks + int(count or 0) > size:
            yield group
            group, chunks = [], 0
        group.append(memory_id)
        chunks += int(count or 0)
    if group:
        yield group


async def extract_part(res: Resources, job: GraphPartJob, started: float) -> str:
    graph = res.store.graph(job.namespace)
    budget = started + SLICE_SECONDS  # then the rest goes to a continuation job
    after, read = job.after, 0
    while True:
        record = await tasks.get_task(res.redis, job.task_id)
        if record is None or record.state not in tasks.ACTIVE:
            return "cancelled"
        rows = await next_batch(res, graph, job, after)
        if not rows:
            break
        if read and time.monotonic() >= budget:  # at least one batch per job: progress
            await enqueue_graph_part(res.redis, res.settings, msgspec.structs.replace(
                job, after=after, seq=job.seq + 1))
            return f"part {job.part + 1}/{job.parts} continues after {after}"
        after = await read_batch(res, graph, job, rows)
        read += 1
        progressed()
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl, progress=False)
    if done >= job.parts:
        if job.rebuild and job.memory_ids is None:
            await drop_orphans(graph)
        await finish(res, job.task_id, job.namespace, "entities extracted")
        return "done"
    return f"part {job.part + 1}/{job.parts} read"


async def next_batch(res: Resources, graph: AsyncGraph, job: GraphPartJob,
                     after: str) -> list:
    query = cypher_graph.GRAPH_BATCH if job.memory_ids is None else cypher_graph.GRAPH_BATCH_OF
    return await run(graph, query, {
        "memory_ids": job.memory_ids, "after": after, "last": job.last or END,
        "rebuild": job.rebuild, "task": job.task_id, "batch": BATCH})


async def read_batch(res: Resources, graph: AsyncGraph, job: GraphPartJob, rows: list) -> str:
    """One batch's contribution written (no model loaded for a batch of code alone); the
    last chunk id of the batch."""
    code, prose = code_chunks(rows)
    entities = relations = 0
    if code:
        with metrics.STAGE_SECONDS.labels("graph_write").time():
            entities, relations = await write_code(graph, code, job.task_id)
    if prose:
        model = await res.entity_model()
        with metrics.STAGE_SECONDS.labels("entities").time():
            found = await model.extract_async([row[1] for row in prose])
        with metrics.STAGE_SECONDS.labels("graph_write").time():
            more = await write_entities(graph, [row[0] for row in prose], found, job.task_id)
        entities, relations = entities + more[0], relations + more[1]
    metrics.CHUNKS_GRAPHED.inc(len(rows))
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, heartbeat_at=time.time(),
                     add={"done": len(rows), "entities": entities, "relations": relations})
    return rows[-1][0]


async def finish(res: Resources, task_id: str, namespace: str, message: str) -> None:
    record = await tasks.get_task(res.redis, task_id)
    await tasks.move(res.redis, task_id, "done", ttl=res.task_ttl,
                     done=record.total if record else 0, finished_at=time.time(),
                     message=message, error="")


# ---- code: a code memory's symbols, from its file's syntax tree ----

MAX_TARGETS = 1024  # names one chunk refers to, kept (a 256-token chunk holds ~100)
MAX_LINES = 32  # lines of one chunk's references to one symbol, kept on its MENTIONS
PENDING_PAGE = 64  # chunks rewritten at a time to link the names a batch defined
PENDING_ROUNDS = 64  # pages, at most, after one batch (64 x 64 chunks)
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
    """A batch's rows (cypher_graph.GRAPH_BATCH): code memory id -> its chunk ids, the rest."""
    code_memory = {row[0]: row[2] for row in rows if code_language(row[3] or "{}")}
    code: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row[0] in code_memory:
            code[code_memory[row[0]]].append(row[0])
    return dict(code), [row for row in rows if row[0] not in code_memory]


async def write_code(graph: AsyncGraph, code: dict[str, list[str]], task_id: str
                     ) -> tuple[int, int]:
    """These chunks' symbols, then the chunks written before that refer to the names they
    defined first; (entities, relations) created."""
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
    """One statement; ((entities, relations) created, names new to the namespace)."""
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
    """The chunk a line belongs to (lines as chunks count them, after ``line_offset``)."""
    at = bisect.bisect_right(memory.starts, (line, 1 << 62, "")) - 1
    return memory.starts[max(0, at)][2]


def contribute(memory: CodeMemory, chunk_ids: set[str], into: Contribution) -> None:
    """Add the definitions and references on the lines of ``chunk_ids``."""
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
    """(chunk, target) -> the lines of the references in the chunks ``here``; pairs noted."""
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
