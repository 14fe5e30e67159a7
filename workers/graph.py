"""The knowledge-graph path: plan -> (fan out) -> extract entities in batches -> write.

``build_graph`` counts the chunks a graph task covers (those not yet read, or all of them on
rebuild) and splits them into ``graph_part`` jobs of about ``PART_CHUNKS`` chunks each:
ranges of chunk ids for the whole namespace (ids start with a hash, so equal slices of the hash
hold about equal numbers of chunks), groups of memories for some memories. No job ever holds
more than one batch of chunk ids. A part reads its chunks in batches of ``BATCH`` in id
order from a cursor, reads each (code from its syntax tree: workers/code_graph.py; the rest
with spaCy NER) and replaces what those chunks contributed in
one statement (workers/store.py), then adds to the task's progress. A part that has worked
for its share of the job time limit passes the rest on to a continuation job (same part, the
cursor where it stopped), so no job runs over its limit and nothing is read twice.

A rebuild rewrites batch by batch, each batch atomically, stamping each chunk with the task:
a cancel or a crash at any moment leaves every chunk with its old or its new contribution,
never neither, and a part that runs again skips the chunks already rewritten. A cancelled task
stops before its next batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import msgspec
from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared import metrics
from zapomni.shared.protocol.ids import graph_task_id
from zapomni.shared.protocol.jobs import GraphJob, GraphPartJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.store import cypher_graph
from zapomni.shared.store.graphstore import run
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import BUILD_GRAPH, GRAPH_PART, enqueue_graph_part, queue_task
from zapomni.workers.code_graph import code_chunks, write_code
from zapomni.workers.outcome import SLICE_SECONDS, JobRun, progressed, task_job
from zapomni.workers.resources import Resources, hook_for_tests
from zapomni.workers.store import drop_orphans, write_entities

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
    # a part reads for SLICE_SECONDS, then passes the rest on to a continuation job (it
    # finishes the batch it is in)
    budget = started + SLICE_SECONDS
    after, read = job.after, 0
    while True:
        if await cancelled(res, job.task_id):
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
        # tests act here (a cancel after the k-th batch): the job, with the last chunk read
        await hook_for_tests(res, "graph_batch", msgspec.structs.replace(job, after=after))
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
    """One batch's contribution written: the symbols of its code chunks from their files'
    syntax trees (workers/code_graph.py), NER over the others (no model loaded for a batch
    of code alone); the last chunk id of the batch."""
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


async def cancelled(res: Resources, task_id: str) -> bool:
    record = await tasks.get_task(res.redis, task_id)
    return record is None or record.state not in tasks.ACTIVE


async def finish(res: Resources, task_id: str, namespace: str, message: str) -> None:
    record = await tasks.get_task(res.redis, task_id)
    await tasks.move(res.redis, task_id, "done", ttl=res.task_ttl,
                     done=record.total if record else 0, finished_at=time.time(),
                     message=message, error="")


async def follow_ingest(res: Resources, ingest_task_id: str, namespace: str,
                        memory_id: str) -> str:
    """After an ingest: extract the new memory's entities in a graph task of its own, unless
    the namespace has automatic extraction turned off. Idempotent (the id is derived).
    Returns the graph task's id, or ''."""
    return await follow_with_graph(res, ingest_task_id, namespace, [memory_id], memory_id)


async def follow_with_graph(res: Resources, write_task_id: str, namespace: str,
                            memory_ids: list[str] | None, memory_id: str = "") -> str:
    """A graph task after a write task (``memory_ids`` None: every chunk of the namespace
    not yet read for entities), unless the namespace has automatic extraction turned off.
    Idempotent (the id is derived from the write task's). Returns its id, or ''."""
    if not res.settings.graph_on(namespace):
        return ""
    task_id = graph_task_id(write_task_id)
    await queue_task(res.redis, res.settings, TaskRecord(
        task_id=task_id, kind="graph", namespace=namespace, memory_id=memory_id,
        created_at=time.time(), message="waiting for a worker"), BUILD_GRAPH,
        GraphJob(task_id=task_id, namespace=namespace, memory_ids=memory_ids), bounded=False)
    return task_id
